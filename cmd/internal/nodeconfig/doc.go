// Package nodeconfig fills a server role's plain configuration struct
// (metad.Config, bookie.Config, broker.Config) from, in rising precedence,
// the struct's defaults, a YAML file (--config), STRATA_* environment
// variables and command-line flags. It is the only package that links
// github.com/spf13/viper: the roles' packages and internal/config know
// only plain structs and pflag flag sets.
//
// # Contract
//
//   - Keys are the flag names: the flag --data-dir is the YAML key
//     data-dir and the variable STRATA_DATA_DIR (config.EnvPrefix; "-" and
//     "." become "_").
//   - Flags win over variables, variables over the file, the file over the
//     defaults, which are the flags' defaults: the caller defines the
//     flags with the struct's defaults.
//   - An unknown key in the YAML file is an error, so a typo in a config
//     file is reported instead of silently ignored.
//   - The struct's fields carry `mapstructure:"flag-name"` tags; the ones
//     shared by every role (internal/config's Endpoints, Security,
//     Exposure, Logging) are embedded squashed.
package nodeconfig
