// Package testtool finds the external programs some tests drive (kcat, the
// Python Kafka clients) and decides what a test does without one.
//
// # Contract
//
//   - A program is found on PATH, else in $(go env GOPATH)/bin, where
//     `go install` puts it. A Python module is found when python3 imports
//     it: the one on PATH, else Debian's /usr/bin/python3, where apt-get
//     installs the Kafka clients (a pyenv or virtualenv python3 does not
//     see them).
//   - Found: the Require function returns the program's path (python3's for
//     a module) and the test goes on.
//   - Missing: the test is skipped with a message that names what is
//     missing and the exact command that installs it. `make test` installs
//     all of them where it may (scripts/deps.sh: root or passwordless sudo),
//     so a skip means the user cannot install Debian packages.
//   - Missing while the tool's STRATA_REQUIRE_* variable is "1": the test
//     fails instead. CI sets every such variable, so CI cannot pass without
//     running the tests that need the tools.
//
// The helm chart check (deploy/helm/chartcheck, its own module) and the
// alert-rule check (deploy/monitoring/check.sh) follow the same rule with
// STRATA_REQUIRE_HELM and STRATA_REQUIRE_PROMTOOL.
package testtool
