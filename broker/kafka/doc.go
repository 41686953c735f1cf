// Package kafka is the broker's Kafka wire-protocol front end: a TCP (or
// TLS) listener that frames, decodes and answers Kafka requests, in
// order, per connection, with the handlers registered for each API. It
// answers ApiVersions, SaslHandshake and SaslAuthenticate itself; every
// other API is a Handler in a Registry, written over the broker's service
// layer. Requests and responses are encoded and decoded only by franz-go's
// kmsg; this package reads and writes the frame size, the request header
// and the response header (below), nothing else.
//
// # Connection model
//
// Per connection, three kinds of goroutine, all owned by the connection
// and waited for when it ends (and by Server.Close):
//
//   - the reader reads a frame, decodes it, applies the checks below, and
//     calls the API's Handler synchronously: Handle(ctx, conn, request)
//     does the work whose order matters and returns a Reply;
//   - each Reply runs in its own goroutine and may block (acknowledgements,
//     a long-poll fetch, a parked JoinGroup);
//   - the writer awaits the Replies in request order and writes each
//     response.
//
// Invariants (tests cite them):
//
//   - K1 Order: Handle is called once per request, in the order the
//     requests arrived, one at a time per connection.
//   - K2 Responses go out in request order, each with its request's
//     correlation id, whatever order the Replies finish in. A nil
//     Response (or a nil Reply) writes nothing: Produce with acks=0.
//   - K3 In flight: at most InFlightPerConnection requests of a
//     connection are read and not yet answered (or skipped); at the bound
//     the reader waits before calling Handle, and TCP pushes back on the
//     client.
//   - K4 Context: Handle and its Reply get the connection's context,
//     carrying what Security added (the principal); it is cancelled when
//     the connection closes, and a Reply must then return promptly.
//   - K5 Failure is closing: a Handler or Reply error or panic, and every
//     protocol violation below, closes the connection with one log line
//     (and strata_broker_kafka_connections_closed_total{reason}); other
//     connections are unaffected and the broker never crashes.
//   - K6 Release: a Reply's response that is a Held has its Release
//     called exactly once, after its frame was handed to the socket
//     (written or failed), or, if the connection closed first, once every
//     Reply of the connection has returned. The Fetch handler's records
//     are held from the broker's fetch budget until then (and the
//     connection's share of it, closed with the connection).
//
// # What closes a connection (reason label)
//
//	frame_too_large          declared size above the cap (checked first),
//	                         or a request but Produce above its lower cap
//	malformed_request        header shorter than 8 bytes, truncated client
//	                         id or header tags, a body kmsg cannot decode
//	unknown_api              an API key not registered (kmsg-unknown too)
//	unsupported_version      a version outside the registered range
//	                         (ApiVersions above its maximum is answered,
//	                         see below)
//	unauthenticated_request  anything but ApiVersions and the SASL APIs
//	                         before authentication, when required; anything
//	                         but ApiVersions and SaslAuthenticate during an
//	                         exchange
//	sasl_mechanism, sasl_state, sasl_failed
//	                         after the answer (below)
//	handler_error, handler_panic
//	                         a Handle or Reply error or panic, or a Reply
//	                         answering with another API's response
//	idle                     nothing received for IdleTimeout while no
//	                         request is unanswered
//	tls_handshake, certificate_refused, io_error, client_closed, shutdown
//
// # Limits and memory
//
// A frame whose declared size exceeds the cap (MaxRequestBytes, default
// 100 MiB; MaxUnauthenticatedRequestBytes, default 512 KiB, while the
// listener requires authentication and the connection has none) is
// refused before any of its body is read. Every API but Produce has a
// lower cap (MaxControlRequestBytes, default 8 MiB), checked on the
// frame's first bytes (its API key), before the rest is read. Below the cap the body's buffer
// starts at 64 KiB and doubles as bytes arrive, so a peer that declares a
// large frame and sends little makes the server hold about what it sent.
// Each frame gets its own buffer (a decoded Produce request's records are
// slices of it). kmsg bounds every array count and string length by the
// bytes left in the frame before allocating, so a declared count of 2^31
// in a small frame allocates nothing; but decoded structs are larger than
// their wire form: an array of near-empty elements takes up to 24 times
// its frame's size on the heap (a Metadata topic: 2 bytes on the wire, a
// 32-byte struct and a 16-byte string). Per connection, what requests
// hold is therefore at most about InFlightPerConnection × cap × 24, and
// before authentication 12 MiB per request; connections per client IP and in
// total are capped (MaxConnectionsPerIP, MaxConnections; refusals
// counted). A connection with
// nothing received for IdleTimeout is closed unless one of its requests
// is still unanswered (waiting for the server is not idleness). What
// responses hold until written is bounded by the broker's fetch budget
// (K6): a client that stops reading holds at most its connection's share
// of it, plus the frame being written (encoded into a buffer of its size)
// until the write deadline (IdleTimeout) closes the connection.
//
// # Bytes on the wire
//
// Every request and response is a frame: an int32 big-endian size, then
// that many bytes. A request body begins with its header:
//
//	v0  api_key int16, api_version int16, correlation_id int32
//	v1  v0, client_id nullable string (int16 length, -1 null)
//	v2  v1, tagged fields (unsigned varint count, then key, size, bytes)
//
// The header is v2 when kmsg says the request version is flexible, else
// v1 (ControlledShutdown v0's header v0 is never served). The client id
// is never a compact string, even in v2 (old brokers must read
// ApiVersions). A response frame is
//
//	correlation_id int32, [tagged fields: one 0 byte], body
//
// with the tag byte (response header v1) when the response version is
// flexible, except for ApiVersions, whose response header is always v0
// (KIP-511: clients read it before knowing the version).
//
// # ApiVersions
//
// Served at versions 0 to 4, before and during authentication, from the
// registry: exactly the registered keys and ranges, plus ApiVersions and
// (with Security) SaslHandshake 0-1 and SaslAuthenticate 0-2, sorted by
// key. v3+ client software names and versions must match
// [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?, else INVALID_REQUEST (the
// connection stays open). A version above 4 is answered without parsing
// the request past its correlation id (KIP-511): a v0 response with
// UNSUPPORTED_VERSION (35) whose ApiKeys hold only ApiVersions 0-4, so
// the client retries at 4 (franz-go starts at 5).
//
// # SASL
//
// With a Security, SaslHandshake v0-v1 and SaslAuthenticate v0-v2 are
// served for the mechanisms in Config.Mechanisms: SCRAM-SHA-256 and
// SCRAM-SHA-512 (RFC 5802/7677 against credentials Security looks up;
// the password never crosses the wire), and PLAIN on TLS connections
// only. Per connection:
//
//	none --SaslHandshake(mechanism offered)--> exchange --tokens--> done
//	     --SaslHandshake(not offered)--> UNSUPPORTED_SASL_MECHANISM (33)
//	       listing those offered, then close
//	exchange --token fails--> SASL_AUTHENTICATION_FAILED (58) with a
//	       message that never tells an unknown user from a wrong
//	       password, then close
//	done or exchange --SaslHandshake--> ILLEGAL_SASL_STATE (34), close
//	none --SaslAuthenticate--> ILLEGAL_SASL_STATE, close
//
// After a v1 handshake each token is a SaslAuthenticate request. After a
// v0 handshake (kafka-python) the tokens are bare frames: int32 size and
// the token, in both directions, no header (PLAIN's success is a
// zero-length frame); a failure closes without an answer. No session
// lifetime is set (KIP-368 re-authentication is not served). On a
// listener that requires authentication (Security.AuthRequired) nothing
// but ApiVersions, SaslHandshake and SaslAuthenticate is served until
// SASL succeeds or a verified client certificate names the principal
// (Security.CertificateContext, asked once per TLS connection); the TLS
// listener verifies client certificates when given
// (tls.VerifyClientCertIfGiven), as the gRPC listener does.
//
// # The adapter
//
// Adapter (adapter.go) registers the APIs the broker serves (apis.go: the
// key, the versions advertised, the handler) and answers them from the
// broker's service layer (broker.Service, broker.Admin, broker.Groups):
// a handler translates the kmsg request into a service call and the
// result into the kmsg response, nothing else; validation, ACLs, budgets,
// routing and idempotence are the service layer's, shared with the gRPC
// API. Service errors become Kafka codes in one table (codes.go; the
// group APIs' additions in groupcodes.go). Kafka concepts without a
// Strata twin are mapped in one place each: node ids are the brokers'
// (kept in metad), leader = the partition's owner and leader epoch = its
// owner epoch (adapter.go: nodes, leader), replicas = ISR = [owner],
// topic ids = TopicRecord ids (topicUUID), the last stable offset = the
// high watermark. Work whose order matters runs in Handle (placing
// produced batches, admin changes, offset commits); waiting runs in the
// Reply (acks, long polls, join and sync rounds). Listen (listener.go)
// builds the Server a broker runs from its configuration.
//
// # Writing a handler
//
//	reg.Register(3, 0, 12, kafka.HandlerFunc(func(ctx context.Context, c *kafka.Conn, r kmsg.Request) (kafka.Reply, error) {
//		req := r.(*kmsg.MetadataRequest)
//		// validate and do in-order work here
//		return func(ctx context.Context) (kmsg.Response, error) {
//			resp := kmsg.NewPtrMetadataResponse() // version set by the Server
//			// t.ErrorCode = c.ErrorCode(req.Key(), kerr.UnknownTopicOrPartition.Code)
//			return resp, nil
//		}, nil
//	}))
//
// # Metrics
//
// strata_broker_kafka_requests_total{api,version},
// strata_broker_kafka_errors_total{api,code} (codes set through
// Conn.ErrorCode), strata_broker_kafka_request_duration_seconds{api},
// strata_broker_kafka_connections_open,
// strata_broker_kafka_connections_refused_total{reason},
// strata_broker_kafka_connections_closed_total{reason},
// strata_broker_kafka_received_bytes_total,
// strata_broker_kafka_sent_bytes_total,
// strata_broker_kafka_authentications_total{mechanism},
// strata_broker_kafka_authentication_failures_total{mechanism}.
package kafka
