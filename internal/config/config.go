package config

import "github.com/spf13/pflag"

// EnvPrefix is the prefix of every environment variable Strata reads.
const EnvPrefix = "STRATA"

// Exposure is what a node's listeners serve beyond its role's own API;
// every role's config embeds it (squashed: its keys are plain flags).
type Exposure struct {
	// EnablePprof serves /debug/pprof/ on the admin address. Off by
	// default: it hands anyone who can reach the port the command line
	// and heap and goroutine dumps.
	EnablePprof bool `mapstructure:"enable-pprof"`
	// GRPCReflection registers gRPC server reflection on the gRPC
	// listener, so grpcurl works without .proto files. On by default.
	GRPCReflection bool `mapstructure:"grpc-reflection"`
}

// DefaultExposure is the default: reflection and pprof off (both show more
// of a node than its clients need).
func DefaultExposure() Exposure { return Exposure{} }

// ExposureFlags defines the flags of Exposure with d's values as defaults.
func ExposureFlags(fs *pflag.FlagSet, d Exposure) {
	fs.Bool("enable-pprof", d.EnablePprof, "serve /debug/pprof/ on the admin address (command line, heap and goroutine dumps: keep it off where the port is reachable)")
	fs.Bool("grpc-reflection", d.GRPCReflection, "register gRPC server reflection (grpcurl without .proto files)")
}
