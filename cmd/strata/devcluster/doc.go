// Package devcluster runs a complete local Strata cluster for development
// (`strata dev`, `make run`): every role as a separate process on fixed
// loopback ports, data under one directory that survives restarts. Metad
// members and bookies start first; brokers start once those are ready
// (each node is ready when its admin /readyz answers 200).
//
// The cluster is described in a state file, DIR/cluster.json, so scripts
// and later `strata dev` commands can find, kill, stop and restart single
// nodes:
//
//	{"dir": ".strata", "nodes": [{"name": "metad-1", "role": "metad", "id": "1",
//	  "pid": 4242, "listen": "127.0.0.1:7001", "admin": "127.0.0.1:7201",
//	  "raft": "127.0.0.1:7101", "data_dir": ".strata/metad-1",
//	  "log_file": ".strata/logs/metad-1.log", "bin": "...", "args": [...]}]}
//
// It also writes a CLI profile (DIR/profile.json, and the user's profile)
// holding the cluster's metad endpoints and bootstrap brokers, so that
// `strata` needs no flags:
//
//	{"metad": "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
//	 "brokers": "127.0.0.1:9092,127.0.0.1:9093"}
//
// # TLS
//
// With Options.TLS (`strata dev --tls`), WriteCertificates creates a CA
// under DIR/tls before the nodes start and issues from it one certificate
// per node (its role, its id as name, valid for the host and localhost)
// and one of role admin; every node gets --tls-cert-file, --tls-key-file
// and --tls-ca-file, and the profile gets the admin certificate's
// absolute paths (tls_ca, tls_cert, tls_key). A new `strata dev --tls`
// issues everything again; the CA's key is not kept.
//
// # Object store
//
// The brokers tier sealed ledgers (--tier-store). When a minio binary is
// found (FindMinIO: beside the role binaries, on PATH, in GOPATH/bin),
// MinIO runs as the node "minio" (role RoleMinIO), started with metad and
// the bookies, on Options.MinIOPort (console on +1) with its data in
// DIR/minio; it is ready once /minio/health/live answers and the bucket
// MinIOBucket exists (created on first start, found on later ones). The
// brokers get s3://strata/dev?endpoint=HOST:PORT&insecure=true and the
// fixed dev credentials in their environment. The credentials are recorded
// in the state file only (Node.Env, which 'strata dev start' passes
// again; the file is owner-only), never in arguments, logs or profiles.
// Without a minio binary, or without brokers, there is no MinIO node and
// the brokers tier to file:///ABS/DIR/tier.
//
// Nodes run in their own process groups: Ctrl-C in the terminal reaches the
// supervisor only, which then stops every node in order (brokers; bookies
// and MinIO; metad), each with SIGTERM, then SIGKILL after a grace period.
package devcluster
