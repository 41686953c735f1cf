// Package chartcheck checks the Helm chart deploy/helm/strata without a
// Kubernetes cluster: `helm lint`, then `helm template` with the default
// values and each testdata/values-*.yaml, decoding every rendered object
// strictly into its Kubernetes API type (an unknown or misplaced field
// fails), plus the chart's own promises: probes on /readyz and /livez,
// PodDisruptionBudgets that select pods, volumes for metad and bookies.
//
// It is its own Go module so that the Kubernetes API packages stay out of
// Strata's go.mod. It needs the helm binary (PATH or $(go env GOPATH)/bin;
// `make test` installs the pinned one) and skips, saying so, without it,
// unless STRATA_REQUIRE_HELM=1 (CI) makes that a failure.
package chartcheck
