// Package config fills a role's plain configuration struct from, in rising
// precedence, the struct's defaults, a YAML file (--config), STRATA_*
// environment variables and command-line flags.
//
// Keys are the flag names: the flag --data-dir is the YAML key data-dir and
// the variable STRATA_DATA_DIR. Unknown YAML keys are an error, so a typo in
// a config file is reported instead of silently ignored.
//
// What every role's config shares is one struct here, embedded squashed
// (its keys stay plain flags): Endpoints (listen, advertise,
// admin-listen), Security (TLS files, admin TLS and token, insecure),
// Exposure (pprof, gRPC reflection) and Logging (log-level, log-format),
// each with its ...Flags function defining the flags.
package config

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// EnvPrefix is the prefix of every environment variable Strata reads.
const EnvPrefix = "STRATA"

// FileFlag is the name of the flag that names a YAML config file.
const FileFlag = "config"

// Load decodes flags, environment and the config file named by --config
// into out, a pointer to a struct whose fields carry `mapstructure:"flag-name"`
// tags. The flags' defaults must already hold the struct's defaults.
func Load(fs *pflag.FlagSet, out any) error {
	v := viper.New()
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_", ".", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(fs); err != nil {
		return fmt.Errorf("config: bind flags: %w", err)
	}
	file := v.GetString(FileFlag)
	if file != "" {
		v.SetConfigFile(file)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return fmt.Errorf("config: read %s: %w", file, err)
		}
		known := map[string]bool{}
		fs.VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
		for _, k := range fileKeys(v) {
			if !known[k] {
				return fmt.Errorf("config: %s: unknown key %q", file, k)
			}
		}
	}
	// Every flag is bound, so every key viper knows is a flag name; the
	// struct may leave some out (e.g. --config itself).
	if err := v.Unmarshal(out); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// fileKeys lists the top-level keys of the config file only (viper's AllKeys
// also holds every bound flag).
func fileKeys(v *viper.Viper) []string {
	var keys []string
	for _, k := range v.AllKeys() {
		if v.InConfig(k) {
			keys = append(keys, k)
		}
	}
	return keys
}

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

// DefaultExposure is the default: reflection on, pprof off.
func DefaultExposure() Exposure { return Exposure{GRPCReflection: true} }

// ExposureFlags defines the flags of Exposure with d's values as defaults.
func ExposureFlags(fs *pflag.FlagSet, d Exposure) {
	fs.Bool("enable-pprof", d.EnablePprof, "serve /debug/pprof/ on the admin address (command line, heap and goroutine dumps: keep it off where the port is reachable)")
	fs.Bool("grpc-reflection", d.GRPCReflection, "register gRPC server reflection (grpcurl without .proto files)")
}
