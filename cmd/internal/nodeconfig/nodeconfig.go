package nodeconfig

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/strata-log/strata/internal/config"
)

// FileFlag is the name of the flag that names a YAML config file.
const FileFlag = "config"

// ErrHelp is returned by Parse when --help was asked for (usage printed).
var ErrHelp = pflag.ErrHelp

// Parse parses args into fs (after adding --config), then fills cfg, a
// pointer to the role's config struct, from --config, STRATA_* variables
// and flags.
func Parse(fs *pflag.FlagSet, args []string, cfg any) error {
	fs.String(FileFlag, "", "YAML config file (keys are the flag names)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return Load(fs, cfg)
}

// Load decodes flags, environment and the config file named by --config
// into out, a pointer to a struct whose fields carry `mapstructure:"flag-name"`
// tags. The flags' defaults must already hold the struct's defaults.
func Load(fs *pflag.FlagSet, out any) error {
	v := viper.New()
	v.SetEnvPrefix(config.EnvPrefix)
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
