package main

import (
	"os"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	ratelimiterv1 "github.com/costwise/batcher/api/ratelimiter/v1"
)

// protoset returns the descriptors of the services limiterbench calls,
// envoy.service.ratelimit.v3 and ratelimiter.v1, with every file they
// import, each file after its imports: what a gRPC client that knows no
// generated code (ghz's --protoset) needs to call them.
func protoset() *descriptorpb.FileDescriptorSet {
	set := &descriptorpb.FileDescriptorSet{}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
	}
	add(rlsv3.File_envoy_service_ratelimit_v3_rls_proto)
	add(ratelimiterv1.File_ratelimiter_v1_ratelimiter_proto)
	return set
}

// writeProtoset writes protoset() to path in the protobuf binary form.
func writeProtoset(path string) error {
	b, err := proto.Marshal(protoset())
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
