// Command strata is the command-line tool for Strata's users and
// operators. Each top-level group of commands lives in its own file
// (meta.go: `strata meta ...`) and registers itself in newRootCommand;
// the logic it runs lives in packages (cmd/strata/internal/cli, metad/metaclient).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/credentials"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/cmd/strata/devcluster"
	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/metad/metaclient"
)

func main() {
	// Groups may add their own persistent hooks; the root's (which parses
	// the global flags) must still run first.
	cobra.EnableTraverseRunHooks = true
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := newRootCommand()
	cmd, err := root.ExecuteContextC(ctx)
	stop()
	code := cli.ExitCode(err)
	if msg := cli.Message(err); msg != "" {
		fmt.Fprintf(os.Stderr, "strata: %s\n", msg)
		var exit *cli.ExitError
		if code == cli.ExitUsage && cmd != nil && !errors.As(err, &exit) {
			fmt.Fprintf(os.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	os.Exit(code)
}

// globalOptions are the flags every command has.
type globalOptions struct {
	metad   string
	broker  string
	timeout time.Duration
	output  string
	format  cli.Format // parsed output
	// tls holds the --tls-ca, --tls-cert and --tls-key flags.
	tls pki.Files
	// user and passwordFile: --user NAME logs in to brokers with a
	// password ($STRATA_PASSWORD or --password-file) instead of a client
	// certificate.
	user, passwordFile string
}

func newRootCommand() *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:   "strata",
		Short: "Command-line tool for Strata, the distributed message log",
		// Errors are printed once, by main, as "strata: <message>"; usage
		// errors get a pointer to --help instead of the whole usage text.
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			f, err := cli.ParseFormat(g.output)
			if err != nil {
				return err
			}
			g.format = f
			if g.timeout <= 0 {
				return fmt.Errorf("--timeout %v: must be positive", g.timeout)
			}
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.metad, "metad", "", "metad endpoints, host:port,... (default $"+cli.EnvMetad+" or "+cli.DefaultMetadEndpoints+")")
	pf.StringVar(&g.broker, "broker", "", "bootstrap brokers, host:port,... (default $"+cli.EnvBroker+", the profile, or "+cli.DefaultBrokers+")")
	pf.DurationVar(&g.timeout, "timeout", 10*time.Second, "time limit for the command (watch runs until interrupted)")
	pf.StringVarP(&g.output, "output", "o", string(cli.FormatText), "output format: text or json")
	pf.StringVar(&g.tls.CA, "tls-ca", "", "CA bundle (PEM) the cluster's certificates chain to: connect over mutual TLS (default $"+cli.EnvTLSCA+" or the profile's)")
	pf.StringVar(&g.tls.Cert, "tls-cert", "", "client certificate (PEM) for mutual TLS (default $"+cli.EnvTLSCert+" or the profile's)")
	pf.StringVar(&g.tls.Key, "tls-key", "", "private key (PEM) of --tls-cert (default $"+cli.EnvTLSKey+" or the profile's)")
	pf.StringVar(&g.user, "user", "", "log in to brokers as this user with a password ($"+cli.EnvPassword+" or --password-file) over TLS, instead of a client certificate (the CA still comes from --tls-ca or the profile)")
	pf.StringVar(&g.passwordFile, "password-file", "", "file whose first line is the password of --user")

	root.AddCommand(newMetaCommand(g), newClusterCommand(g), newLedgerCommand(g), newBookieCommand(g), newDevCommand(g),
		newTopicCommand(g), newProduceCommand(g), newConsumeCommand(g), newGroupCommand(g), newBenchCommand(g),
		newTierCommand(g), newNodeCommand(g), newUserCommand(g), newACLCommand(g), newBrokerCommand(g), newCertCommand(g), newChaosCommand())
	return root
}

// endpoints resolves the metad endpoints from --metad, $STRATA_METAD, the
// profile `strata dev` writes, or the default.
func (g *globalOptions) endpoints() ([]string, error) {
	fromEnv := os.Getenv(cli.EnvMetad)
	if fromEnv == "" && g.metad == "" {
		prof, err := devcluster.LoadProfile()
		if err != nil {
			return nil, err
		}
		fromEnv = prof.Metad
	}
	return cli.ResolveEndpoints(g.metad, fromEnv)
}

// brokers resolves the bootstrap brokers from --broker, $STRATA_BROKER, the
// profile `strata dev` writes, or the default.
func (g *globalOptions) brokers() ([]string, error) {
	fromEnv := os.Getenv(cli.EnvBroker)
	if fromEnv == "" && g.broker == "" {
		prof, err := devcluster.LoadProfile()
		if err != nil {
			return nil, err
		}
		fromEnv = prof.Brokers
	}
	return cli.ResolveBrokers(g.broker, fromEnv)
}

// tlsFiles resolves the TLS files from the --tls-* flags, the
// STRATA_TLS_* variables or, when the addresses came from it
// (fromProfile), the profile (zero: plaintext). A cluster named by flags
// or variables never gets the profile's certificate, and the profile is
// not read for it.
//
// forUser (a --user login to brokers) takes a source naming the CA alone
// and returns only the CA.
func (g *globalOptions) tlsFiles(fromProfile, forUser bool) (pki.Files, error) {
	env := pki.Files{CA: os.Getenv(cli.EnvTLSCA), Cert: os.Getenv(cli.EnvTLSCert), Key: os.Getenv(cli.EnvTLSKey)}
	var prof devcluster.Profile
	if fromProfile && g.tls == (pki.Files{}) && env == (pki.Files{}) {
		var err error
		if prof, err = devcluster.LoadProfile(); err != nil {
			return pki.Files{}, err
		}
	}
	if forUser {
		return cli.ResolveTLSForUser(g.tls, env, prof.TLSFiles())
	}
	return cli.ResolveTLS(g.tls, env, prof.TLSFiles())
}

// metadFromProfile and brokersFromProfile report whether the metad
// endpoints, or the brokers, come from the profile (no flag, no variable).
func (g *globalOptions) metadFromProfile() bool {
	return g.metad == "" && os.Getenv(cli.EnvMetad) == ""
}
func (g *globalOptions) brokersFromProfile() bool {
	return g.broker == "" && os.Getenv(cli.EnvBroker) == ""
}

// credentials are the transport credentials of connections to metad and
// bookies: mutual TLS with tlsFiles, or plaintext.
func (g *globalOptions) credentials() (credentials.TransportCredentials, error) {
	files, err := g.tlsFiles(g.metadFromProfile(), false)
	if err != nil {
		return nil, err
	}
	creds, err := mtls.Load(files)
	if err != nil {
		return nil, err
	}
	return creds.Transport(), nil
}

// brokerClient connects to the brokers. Each attempt of a call gets at most
// --timeout; commands that stream (produce, consume, bench) are not
// otherwise bounded by it.
func (g *globalOptions) brokerClient(ctx context.Context) (*client.Client, error) {
	addrs, err := g.brokers()
	if err != nil {
		return nil, err
	}
	files, err := g.tlsFiles(g.brokersFromProfile(), g.user != "")
	if err != nil {
		return nil, err
	}
	cfg := client.Config{
		Brokers:        addrs,
		ClientID:       "strata-cli",
		RequestTimeout: min(30*time.Second, g.timeout),
		TLSCAFile:      files.CA, TLSCertFile: files.Cert, TLSKeyFile: files.Key,
	}
	if g.user != "" {
		if files.CA == "" {
			return nil, cli.Exit(cli.ExitUsage, errors.New("--user sends a password over TLS only: give --tls-ca (or use a TLS profile)"))
		}
		password, err := cli.ResolvePassword(g.passwordFile, os.Getenv(cli.EnvPassword))
		if err != nil {
			return nil, cli.Exit(cli.ExitUsage, err)
		}
		// The user, not the profile's certificate, is the principal.
		cfg.TLSCertFile, cfg.TLSKeyFile = "", ""
		cfg.User, cfg.Password = g.user, password
	}
	return client.New(ctx, cfg)
}

// withBroker runs fn with a broker client and a context bounded by
// --timeout, closing both afterwards.
func (g *globalOptions) withBroker(cmd *cobra.Command, fn func(context.Context, *client.Client) error) error {
	ctx, cancel := g.commandContext(cmd)
	defer cancel()
	c, err := g.brokerClient(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

// metaClient connects to metad. Each attempt of a call gets at most half
// of --timeout (and the client's default), so that a member that holds a
// read without answering leaves time to try another.
func (g *globalOptions) metaClient() (*metaclient.Client, error) {
	eps, err := g.endpoints()
	if err != nil {
		return nil, err
	}
	creds, err := g.credentials()
	if err != nil {
		return nil, err
	}
	return metaclient.New(metaclient.Config{
		Credentials:    creds,
		Endpoints:      eps,
		RequestTimeout: min(metaclient.DefaultRequestTimeout, g.timeout/2),
		DialTimeout:    min(metaclient.DefaultDialTimeout, g.timeout),
	})
}

// commandContext bounds a command by --timeout (and Ctrl-C, via main).
func (g *globalOptions) commandContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), g.timeout)
}

// printer writes results to the command's stdout in --output's format.
func (g *globalOptions) printer(cmd *cobra.Command) *cli.Printer {
	return &cli.Printer{W: cmd.OutOrStdout(), Format: g.format}
}

// withMeta runs fn with a metad client and a context bounded by --timeout,
// closing both afterwards.
func (g *globalOptions) withMeta(cmd *cobra.Command, fn func(context.Context, *metaclient.Client) error) error {
	c, err := g.metaClient()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := g.commandContext(cmd)
	defer cancel()
	return fn(ctx, c)
}
