// Package connlimit guards a network listener against connections that
// cost the server memory before they prove anything: it caps the
// connections open at once, in total and per source IP, and can hold each
// admitted connection back from the server until a handshake (TLS, or a
// first byte) completes within a deadline. The gRPC, Raft and admin HTTP
// listeners of every node go through it.
//
// # Contract
//
// Listener wraps a net.Listener. Its Accept returns only connections that
// were admitted (and, with Config.Handshake, that completed the handshake);
// every other connection is closed at once, counted in the refused metric
// by reason, and never seen by the server:
//
//	max_connections         MaxConnections were open
//	max_connections_per_ip  MaxConnectionsPerIP were open from its IP
//	handshake               the handshake failed or did not finish within
//	                        HandshakeTimeout (or the listener closed first)
//
// # Invariants
//
//   - L1. At most MaxConnections admitted connections are open at once, and
//     at most MaxConnectionsPerIP from one source IP; a connection is open
//     from its admission until it is closed, whoever closes it (the server,
//     the handshake, or the listener's Close for one still handshaking).
//   - L2. Nothing is allocated for a connection before its admission but
//     what accepting it costs; a refused connection is closed before
//     Accept returns anything.
//   - L3. With a Handshake, Accept never returns a connection whose
//     handshake has not completed, and the accept loop never waits for a
//     handshake: each runs in its own goroutine, with the connection's
//     deadline at HandshakeTimeout, cleared once it succeeds. There are at
//     most MaxConnections such goroutines (L1).
//   - L4. Close closes the inner listener and every connection still
//     handshaking, and returns once every goroutine of the Listener has.
//
// # Counting without wrapping
//
// Accept hands the server the connection the inner listener accepted, not
// a wrapper, so servers keep their optimisations for *net.TCPConn (gRPC
// reads an idle plaintext connection's frames through a shared buffer pool
// only when it gets a *net.TCPConn; a wrapper would cost every connection
// its own 256 KiB buffer). The Listener therefore learns that a connection
// closed by asking its file descriptor (syscall.RawConn.Control fails once
// it is closed), lazily: the connections of an IP are swept when that IP
// reaches its cap, all connections when the total is reached (at most
// every fullSweepInterval, so a flood of refused connections costs a sweep
// only that often), and at every metrics scrape. A connection that is not
// a syscall.Conn is wrapped so that its Close is seen.
//
// # Bytes on the wire
//
// FirstByte reads one byte and returns a connection that yields it again
// first. TLSOrPlain reads the first byte the same way and, when it is 0x16
// (a TLS handshake record's content type; no HTTP request starts with
// it), runs the TLS handshake over the connection with that byte put back;
// any other byte is served as plaintext.
package connlimit
