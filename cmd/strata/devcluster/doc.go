// Package devcluster runs a complete local Strata cluster for development
// (`strata dev`, `make run`): every role as a separate process on fixed
// loopback ports, data under one directory that survives restarts. Metad
// members and bookies start first; brokers start once those are ready
// (each node is ready when its admin /readyz answers 200).
//
// # Ports
//
// Each role's ports start from an option (the defaults below); node i of a
// role takes the first port + i-1. MinIO's follow the first Kafka port
// unless Options.MinIOPort (--minio-port) names one, so that every port
// of a cluster moves with the four first ports: a second cluster given
// other ones (each +10000, say) gets MinIO ports of its own too. Plan
// refuses options whose ranges overlap (two listeners on one address).
//
//	metad    client 7001  raft +100 (7101)  admin +200 (7201)
//	bookie   client 7301  admin +100 (7401)
//	broker   gRPC   7501  admin +100 (7601)  Kafka protocol 9092
//	MinIO    S3     Kafka +100 (9192)  console +101 (9193)
//
// For the largest cluster (5 metad, 20 bookies, 20 brokers) the default
// ranges are metad 7001-7205, bookies 7301-7420, brokers 7501-7620, Kafka
// 9092-9111 and MinIO 9192-9193: disjoint for every size, as
// TestMinIOPortDerived checks.
//
// Every broker serves the Kafka protocol (--kafka-listen, advertised as
// the same address), so Kafka clients bootstrap from 127.0.0.1:9092 with
// no settings; the CLI and the Go client use the gRPC ports.
//
// The cluster is described in a state file, DIR/cluster.json, so scripts
// and later `strata dev` commands can find, kill, stop and restart single
// nodes:
//
//	{"dir": ".strata", "nodes": [{"name": "metad-1", "role": "metad", "id": "1",
//	  "pid": 4242, "listen": "127.0.0.1:7001", "admin": "127.0.0.1:7201",
//	  "raft": "127.0.0.1:7101", "data_dir": ".strata/metad-1",
//	  "log_file": ".strata/logs/metad-1.log", "bin": "...", "args": [...]},
//	  ...
//	  {"name": "broker-1", "role": "broker", "id": "k1", "pid": 4250,
//	  "listen": "127.0.0.1:7501", "admin": "127.0.0.1:7601",
//	  "kafka": "127.0.0.1:9092", ...}]}
//
// It also writes a CLI profile (DIR/profile.json, and the user's profile)
// holding the cluster's metad endpoints and bootstrap brokers, so that
// `strata` needs no flags:
//
//	{"metad": "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
//	 "brokers": "127.0.0.1:7501,127.0.0.1:7502"}
//
// # TLS
//
// With Options.TLS (`strata dev --tls`), WriteCertificates creates a CA
// under DIR/tls before the nodes start and issues from it one certificate
// per node (its role, its id as name, valid for the host and localhost)
// and one of role admin; every node gets --tls-cert-file, --tls-key-file
// and --tls-ca-file, and the profile gets the admin certificate's
// absolute paths (tls_ca, tls_cert, tls_key). A new `strata dev --tls`
// issues everything again; the CA's key is not kept. The brokers' Kafka
// listeners then speak TLS too and serve only clients that authenticate:
// with a certificate from the CA (the admin one) or with SASL as a user
// made by `strata user create`; the start-up summary prints both ways as
// kcat command lines.
//
// # Object store
//
// The brokers tier sealed ledgers (--tier-store). When a minio binary is
// found (FindMinIO: beside the role binaries, on PATH, in GOPATH/bin),
// MinIO runs as the node "minio" (role RoleMinIO), started with metad and
// the bookies, on the first Kafka port + 100 or Options.MinIOPort (console
// one above) with its data in DIR/minio; it is ready once
// /minio/health/live answers and the bucket MinIOBucket exists (created
// on first start, found on later ones). The brokers get
// s3://strata/dev?endpoint=HOST:PORT&insecure=true and the fixed dev
// credentials in their environment. The credentials are recorded
// in the state file only (Node.Env, which 'strata dev start' passes
// again; the file is owner-only), never in arguments, logs or profiles.
// Without a minio binary, or without brokers, there is no MinIO node and
// the brokers tier to file:///ABS/DIR/tier.
//
// # Processes
//
// Nodes run in their own process groups: Ctrl-C in the terminal reaches the
// supervisor only, which then stops every node in order (brokers; bookies
// and MinIO; metad), each with SIGTERM, then SIGKILL after a grace period.
//
// Every node dies with the process that started it (Start), even one
// killed with SIGKILL: on Linux each node is started with the parent-death
// signal SIGKILL, from one goroutine locked to its OS thread for the life
// of the process, since the kernel ties that signal to the forking thread
// (golang/go#27505). So a `strata dev`, a bench suite or a chaos run that
// is killed leaves no node behind. Elsewhere there is no such signal, and
// nodes outlive a supervisor killed with SIGKILL.
//
// `strata dev start NODE` is a command that exits at once, so it does not
// start the node itself: it asks the running `strata dev` to, over the
// control socket DIR/dev.sock (owner-only; one line each way: "start
// NAME", then "ok PID" or "error TEXT"), and then waits for the node to be
// ready. The node is thus the supervisor's child like the others and dies
// with it. When no `strata dev` answers (it was killed, or the cluster was
// started by another program through Up), the command starts the node
// itself, free to outlive the command, and says so: such a node runs
// until 'strata dev stop NODE' (a new `strata dev` for the directory
// refuses to start while one of its nodes runs). A
// `strata dev` also refuses to start while another answers on the
// directory's socket, and replaces a socket nobody answers on.
package devcluster
