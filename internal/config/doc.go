// Package config holds what every role's configuration shares, as plain
// structs with defaults and the pflag flags that set them: Endpoints
// (listen, advertise, admin-listen), Security (TLS files, admin TLS and
// token, insecure), Limits (the listeners' connection caps, handshake
// and idle timeouts, gRPC streams per connection), Exposure (pprof, gRPC
// reflection) and Logging (log-level, log-format), each with its
// ...Flags function. A role's
// config embeds them squashed (`mapstructure:",squash"`), so their keys
// stay plain flags.
//
// It links no configuration loader: cmd/internal/nodeconfig, which only
// the commands import, fills a role's struct from a YAML file, STRATA_*
// environment variables (EnvPrefix) and the flags defined here (keys are
// the flag names: --data-dir is the YAML key data-dir and the variable
// STRATA_DATA_DIR).
package config
