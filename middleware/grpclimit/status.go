package grpclimit

import (
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/costwise/batcher/middleware/limitcore"
)

// ExhaustedStatus returns the status of a call denied by policies:
// codes.ResourceExhausted with a google.rpc.RetryInfo detail carrying
// retry (rounded up to whole seconds, as Retry-After is, so a client that
// obeys it is not early) and a google.rpc.QuotaFailure detail naming the
// policies. A zero retry, for a cost no wait can admit, gives no
// RetryInfo: clients that see RetryInfo retry, and this call must not be.
func ExhaustedStatus(retry time.Duration, policies ...string) *status.Status {
	msg := "grpclimit: rate limit exceeded by " + strings.Join(policies, ", ")
	if retry <= 0 {
		msg = "grpclimit: cost exceeds what " + strings.Join(policies, ", ") + " can ever admit"
	}
	st := status.New(codes.ResourceExhausted, msg)
	qf := &errdetails.QuotaFailure{}
	for _, p := range policies {
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject: "policy:" + p, Description: "quota exceeded",
		})
	}
	details := []protoadapt.MessageV1{qf}
	if retry > 0 {
		d := time.Duration(limitcore.Seconds(retry)) * time.Second
		details = append([]protoadapt.MessageV1{&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}}, details...)
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		return withDetails
	}
	return st
}

// UnavailableStatus returns the status of a call refused because the store
// failed and the interceptor fails closed: codes.Unavailable with a
// RetryInfo of retry.
func UnavailableStatus(retry time.Duration) *status.Status {
	st := status.New(codes.Unavailable, "grpclimit: rate limit store unavailable")
	d := time.Duration(limitcore.Seconds(retry)) * time.Second
	if withDetails, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)}); err == nil {
		return withDetails
	}
	return st
}

// RetryDelay returns the RetryInfo delay of err's status, if it has one.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return 0, false
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.RetryDelay != nil {
			return ri.RetryDelay.AsDuration(), true
		}
	}
	return 0, false
}

// headerMD converts rate-limit header fields into response metadata:
// names lower-cased, as HTTP/2 and gRPC metadata require.
func headerMD(h map[string][]string) metadata.MD {
	md := make(metadata.MD, len(h))
	for k, v := range h {
		md[strings.ToLower(k)] = v
	}
	return md
}
