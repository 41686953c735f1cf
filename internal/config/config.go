// Package config fills a role's plain configuration struct from, in rising
// precedence, the struct's defaults, a YAML file (--config), STRATA_*
// environment variables and command-line flags.
//
// Keys are the flag names: the flag --data-dir is the YAML key data-dir and
// the variable STRATA_DATA_DIR. Unknown YAML keys are an error, so a typo in
// a config file is reported instead of silently ignored.
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
