// Package service is limiterd: its configuration, its stores, its REST and
// gRPC servers, and Run, which serves them until its context ends.
//
// The command (cmd/limiterd) is a thin main over Main; tests call Main or
// Run in their own process. The package is internal to the command: the
// parts a Go program embeds are the public packages it is built from
// (limit, envoyrl, middleware/httplimit), and the configuration users
// depend on is the YAML file and the flags, which a Go API of its own
// would only duplicate and freeze.
//
// Both gRPC servers (lean and grpc-go) serve grpc.health.v1 and server
// reflection, and TLS or mutual TLS themselves with one crypto/tls
// configuration (grpctls.go); the Envoy rules come from a directory
// (rules.go) or from an xDS management server (xds.go).
//
// # envoyproxy/ratelimit mode
//
// The configuration is the file --config names, the whole of it. Without
// --config, limiterd is in envoyproxy/ratelimit mode when at least one of
// envoyproxy/ratelimit's environment variables (those of its settings.go,
// listed in envoyenv.go; set to the empty string counts as unset) is set:
// then every one of them takes its value or envoyproxy/ratelimit's default
// (envoyenv.go). So USE_STATSD unset means true, which is refused (set
// USE_STATSD=false and USE_PROMETHEUS=true); REDIS_URL unset means its
// nutcracker socket; the store is Redis; LOG_LEVEL is WARN; the rules are
// read from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY as its
// goruntime loader reads them. A variable set to a value limiterd cannot
// honour stops it with one line naming the variable. Without --config and
// without any of those variables, limiterd's own defaults hold. In every
// case the flags given win. With --config, the variables that are set are
// named in one warning at start and not read.
//
// What envoyproxy/ratelimit's operators rely on around the protocol is
// here too: GET /healthcheck on the REST port with its health semantics,
// followed by the gRPC health service (health.go); GET /rlconfig on
// --rlconfig-addr and the debug address; its metric names and labels
// beside limiterd's own (rlmetrics.go).
//
// # Limits on what callers send
//
// Every field below is in the file's limits, servers or backends section
// and has a flag of the same name with dashes; a flag given wins over the
// file.
//
//	limit                          default   flag / field                                   when exceeded
//	key length                     1 KiB     --max-key-bytes / limits.max_key_bytes         400 "X-Client-Key longer than 1024 bytes"; InvalidArgument
//	                                                                                         (Envoy: domain, keys and values of a descriptor together)
//	descriptors per Envoy request  64        --max-descriptors / limits.max_descriptors     400 / InvalidArgument "65 descriptors, more than 64"
//	entries per descriptor         32        --max-descriptor-entries /                     400 / InvalidArgument "descriptor 0: 33 entries, more than 32"
//	                                         limits.max_descriptor_entries
//	REST body                      64 KiB    --max-body-bytes / limits.max_body_bytes       413 "request body larger than 65536 bytes"
//	request header                 16 KiB    --max-header-bytes / limits.max_header_bytes   REST 431; gRPC: the stream refused (header list too large)
//	gRPC request message           4 MiB     --grpc-max-recv-msg-bytes /                    ResourceExhausted
//	                                         servers.grpc_max_recv_msg_bytes
//	metric label sets              10,000    --max-metric-series /                          new rule labels counted as rule="other"; a domain the
//	                                         limits.max_metric_series                       rules do not name is always domain="other"; as many
//	                                                                                         ratelimit_service_rate_limit_* keys, then key1="other"
//	keys held in memory            1,048,576 backends.in_memory.max_keys                    keyed: keys at rest dropped first, then the one that spent
//	(each memory store)                                                                     least evicted (counted); Envoy counters: a new counter on a
//	                                                                                         full shard fails the call to the failure policy
//	                                                                                         (fail_open: OK), counters held keep counting
//	rule file size after aliases   2^20 nodes                                               the reload fails (rule_reloads_total{result="failure"})
//
// # Server defaults
//
// Both gRPC servers, grpc-go's and the lean one, get the same values (but
// for the header list, below), and both serve server reflection and
// grpc.health.v1.
//
//	setting                           default  flag / field                                  effect
//	REST read header timeout          5 s      --read-header-timeout / servers.read_header_timeout    connection closed
//	REST read timeout (whole request) 30 s     --read-timeout / servers.read_timeout                  connection closed
//	REST write timeout                10 s     --write-timeout / servers.write_timeout                connection closed
//	REST idle keep-alive              2 min    --idle-timeout / servers.idle_timeout                  connection closed
//	gRPC streams per connection       1,000    --grpc-max-concurrent-streams /                        REFUSED_STREAM (clients retry)
//	                                           servers.grpc_max_concurrent_streams
//	gRPC keepalive enforcement        10 s     --grpc-keepalive-min-time /                            pings more often: GOAWAY too_many_pings
//	                                           servers.grpc_keepalive_min_time                        (pings without calls allowed)
//	gRPC idle connection              10 min   --grpc-max-connection-idle /                           GOAWAY, the client reconnects
//	                                           servers.grpc_max_connection_idle
//	gRPC handshake timeout            10 s     --grpc-handshake-timeout /                             connection closed
//	                                           servers.grpc_handshake_timeout
//	gRPC header list (lean server)    16 KiB   --max-header-bytes / limits.max_header_bytes           stream refused
//	                                           (grpc-go keeps its own 16 MiB: set, it breaks h2spec 4.3, 5.5, 6.2)
//	gRPC receive message              4 MiB    --grpc-max-recv-msg-bytes                              ResourceExhausted
//
// The /metrics and --debug-addr servers have the REST timeouts (pprof's
// profiles without the write timeout). /debug/pprof/ is served only on
// --debug-addr, which is empty by default: give a loopback address.
package service
