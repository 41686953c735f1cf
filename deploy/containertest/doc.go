// Package containertest runs Strata as containers (the image `make image-strata`
// builds) on a Docker network each test run creates, and injects faults a
// loopback cluster cannot: a container cut off the network with `docker
// network disconnect`, `docker kill`, restarts. Its tests are in
// _test.go files only; this package has no API.
//
// A run builds the strata image (make image-strata), creates the network
// strata-ct-<random> with its own /24, starts 3 metad, 4 bookies and 2
// brokers (each with its Kafka protocol listener) with fixed addresses on it, and removes every container (with
// its anonymous volume) and the network when the test ends, failed or not.
// The host reaches the nodes at their container addresses (Linux bridge
// networking). Those nodes run without TLS (--insecure): the scenarios are
// about faults. TestComposeDefaultTLS runs deploy/compose as it ships
// instead (docker-compose v1; TLS, authentication on) under a project of
// its own, and `docker-compose down -v` removes it. Without Docker, or
// with -short, the tests skip and say why.
package containertest
