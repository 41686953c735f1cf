package cli

import (
	"fmt"
	"net"
	"strings"
)

// EnvMetad names the environment variable that lists metad endpoints when
// --metad is not given.
const EnvMetad = "STRATA_METAD"

// DefaultMetadEndpoints is used when neither --metad nor $STRATA_METAD is
// set: a local three-member cluster.
const DefaultMetadEndpoints = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"

// ResolveEndpoints picks the metad endpoints: the --metad value if set,
// else the environment's value, else DefaultMetadEndpoints. The value is a
// comma-separated host:port list; blanks around entries are ignored and
// repeated entries are dropped.
func ResolveEndpoints(flagValue, envValue string) ([]string, error) {
	return resolveAddresses("--metad", flagValue, EnvMetad, envValue, DefaultMetadEndpoints)
}

// EnvBroker names the environment variable that lists bootstrap brokers
// when --broker is not given.
const EnvBroker = "STRATA_BROKER"

// DefaultBrokers is used when neither --broker, $STRATA_BROKER nor a
// profile names brokers: the brokers of a default `strata dev` cluster.
const DefaultBrokers = "127.0.0.1:7501,127.0.0.1:7502"

// ResolveBrokers picks the bootstrap brokers like ResolveEndpoints: the
// --broker value, else the environment's (or profile's), else
// DefaultBrokers.
func ResolveBrokers(flagValue, envValue string) ([]string, error) {
	return resolveAddresses("--broker", flagValue, EnvBroker, envValue, DefaultBrokers)
}

func resolveAddresses(flagName, flagValue, envName, envValue, def string) ([]string, error) {
	source, value := flagName, flagValue
	if strings.TrimSpace(value) == "" {
		source, value = "$"+envName, envValue
	}
	if strings.TrimSpace(value) == "" {
		source, value = "default", def
	}
	var out []string
	seen := map[string]bool{}
	for _, ep := range strings.Split(value, ",") {
		ep = strings.TrimSpace(ep)
		if ep == "" {
			continue
		}
		host, port, err := net.SplitHostPort(ep)
		if err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("%s: endpoint %q: want host:port", source, ep)
		}
		if !seen[ep] {
			seen[ep] = true
			out = append(out, ep)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no endpoints", source)
	}
	return out, nil
}
