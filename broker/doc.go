// Package broker is Strata's broker: it owns partitions, serves produce,
// fetch and admin requests over gRPC, and, when elected, is the controller
// that assigns partitions to brokers. A broker keeps no local state: a
// partition's log is a list of ledgers (package broker/partlog) described in
// metad, and ownership is a lease.
//
// Ownership (DESIGN §5): the controller writes an Assignment per partition;
// the assigned broker waits until no other broker holds the partition's
// Ownership key (a dead owner's vanishes with its lease, a live one releases
// it when it sees the assignment move), takes the partition over (fence and
// recover its open ledger, CAS the ledger list, rebuild producer state),
// writes Ownership on its own lease and serves. A fenced ledger, a lost CAS
// or a lost session drops the partition at once: ownership in metad is a
// hint, fencing is what keeps two owners from both writing.
//
// # State in metad
//
//	/strata/brokers/<id>                    BrokerInfo, on the broker's lease
//	/strata/broker-drains/<id>              BrokerDrain: an operator's drain (package broker/drain)
//	/strata/controller                      ControllerRecord, on the controller's lease
//	/strata/topics/<name>                   TopicRecord (partitions, configs set explicitly)
//	/strata/assignments/<topic>/<p>         Assignment{broker, epoch}: the controller's decision
//	/strata/owners/<topic>/<p>              Ownership{broker, address, epoch}, on the owner's lease
//	/strata/partitions/<topic>/<p>          PartitionLog (package partlog)
//	/strata/ledger-index/<ledger>           LedgerIndex of a closed segment (package partlog)
//	/strata/producer-ids-next               producer id counter, taken in blocks of 100
//	/strata/broker-node-ids/<id>            the broker's node id (Kafka's int32), never reused
//	/strata/broker-node-ids-next            node id counter
//
// The records are defined in proto/broker/v1/meta.proto; keys.go builds
// the keys. The broker reads brokers, topics, assignments, owners, drains
// and the controller through mirrors (mirror.go: a list, then a watch from its
// revision), so routing and metadata calls never wait for metad.
//
// Decisions and I/O are apart: the controller's placement (placement.go,
// placer, invariants PL1-PL5: decoded records indexed in memory) and the
// owner's hand-over (ownership_machine.go: planOwnership, handover,
// retakeAfterFailure, invariants O1-O3: pure functions of decoded records
// and a time passed in) do no I/O and read no clock, tested without
// sockets or sleeps; controller.go and owner.go
// only read the mirrors and metad, call them and write or act on the
// result. New(cfg, Deps{...}) builds a broker over injected dependencies
// (metad client, ledger environment, clock, logger, registry); Open builds
// the real ones. broker/brokertest runs real brokers in-process over an
// in-process metad and in-memory bookies for client and CLI tests.
//
// # Service layer and adapters
//
// Clients reach the broker through two protocols, both thin adapters over
// one service layer: Service (service.go: produce, fetch, list offsets,
// epoch ends, metadata, producer ids, record deletion), Admin (admin.go:
// topics and the cluster) and Groups (groups.go: both group protocols, the
// offsets). The service layer does the validation, authorization,
// budgets and limits, ownership routing, idempotence (partlog) and the
// request metrics; it returns the package's sentinel errors (errors.go),
// partlog's and group's. The gRPC adapter (grpc.go) translates brokerpb
// messages and maps errors with classify; the Kafka adapter (package
// broker/kafka) translates kmsg messages and maps errors to Kafka codes.
// Produce comes in two halves (StartProduce places every batch in its
// log, then a wait for the acks) so that an adapter that must answer a
// connection's requests in order can place them in order and wait
// concurrently. Fetch (fetch.go) holds its results' bytes from the
// broker's fetch budget (fetchbudget.go) and returns a release that the
// adapter calls once the response is written: the gRPC adapter through a
// response whose last buffer's release by gRPC calls it (grpcfetch.go),
// the Kafka one through the connection's release of a Held response; each
// client connection gets a FetchConn, its share of the budget, closed at
// its end. KafkaSecurity (kafkasecurity.go) authenticates the Kafka
// listener's clients against the same certificates and users.
//
// With TLS, every call has a principal (a certificate's, or a user's
// whose password matched its credential in metad) and every service call
// asks authorize for the operation it performs against the ACLs the
// broker mirrors from metad (security.go; the rules are internal/acl's,
// the password format internal/scram's). Without TLS nothing is checked.
//
// # Invariants
//
//   - B1 An assignment changes only by compare-and-set on the version the
//     controller saw, and its epoch grows by one at each change.
//   - B2 A broker serves a partition only after partlog.Open (fence,
//     recover, list CAS) succeeded for the current assignment epoch, and
//     stops at once when its log fails, its session ends or the assignment
//     moves; it removes only the ownership record it wrote.
//   - B3 Errors reach gRPC clients through classify (errors.go), the one
//     place that maps them to gRPC codes and ErrorInfo reasons (the
//     authentication interceptors' own refusals aside: they precede any
//     call); Kafka clients through broker/kafka's codeOf.
//   - B4 With TLS, no service call does work for a principal before
//     authorize allowed it (a refused Produce or Fetch stores or reads nothing for
//     any of its partitions); brokers (role broker) are never checked.
//   - B5 Fetch memory: the bytes of the fetch responses not yet written
//     (and the read-ahead being read) never exceed the responses' part of
//     --max-inflight-fetch-bytes but by the first batch of a fetch larger
//     than its reservation; each is released exactly once; a fetch that
//     finds no room answers (with what it has, or empty), it never fails
//     for it nor waits beyond its long poll (or fetchBudgetWait).
package broker
