// Package chartcheck checks the Helm chart deploy/helm/strata without a
// Kubernetes cluster: `helm lint`, then `helm template` with the default
// values and each testdata/values-*.yaml, decoding every rendered object
// strictly into its Kubernetes API type (an unknown or misplaced field
// fails), plus the chart's own promises: probes on /readyz and /livez,
// PodDisruptionBudgets that select pods, volumes for metad and bookies;
// the secure default (TLS settings on every role, no --insecure, https
// probes, the certificate Job and its narrow RBAC) and the insecure
// opt-out rendering plaintext. TestPodCertificates builds this
// repository's strata CLI and runs each role's certificate init
// container as rendered, checking the certificate's role, name and hosts
// against the addresses the node is dialled at.
//
// It is its own Go module so that the Kubernetes API packages stay out of
// Strata's go.mod. It needs the helm binary (PATH or $(go env GOPATH)/bin;
// `make test` installs the pinned one) and skips, saying so, without it,
// unless STRATA_REQUIRE_HELM=1 (CI) makes that a failure.
package chartcheck
