package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/cmd/strata/internal/cli/certs"
)

// `strata cert` makes what a TLS cluster needs with no other tool: the
// compose file's certs service and the Helm chart's Job and init
// containers run it (docs/deploy.md).

const day = 24 * time.Hour

func newCertCommand(g *globalOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "cert",
		Short: "Make a CA and the certificates of a TLS cluster (roles in certificates: docs/security.md)",
	}
	c.AddCommand(newCertCACommand(), newCertIssueCommand(), newCertKubernetesCommand(g))
	return c
}

func newCertCACommand() *cobra.Command {
	var name string
	var days int
	cmd := &cobra.Command{
		Use:   "ca DIR",
		Short: "Make a CA in DIR (ca.crt, ca.key) unless DIR already holds one",
		Long: "Creates a CA (ECDSA P-256, for certificates and CRLs) in DIR: ca.crt and ca.key, the key\n" +
			"readable by its owner only. A CA already in DIR is kept, never replaced: every certificate\n" +
			"it issued stays trusted. Whoever holds ca.key can issue any certificate, admin included.",
		Args: cobra.ExactArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			if days <= 0 {
				return cli.Exit(cli.ExitUsage, errors.New("--days must be positive"))
			}
			created, err := certs.EnsureCA(args[0], name, time.Duration(days)*day)
			if err != nil {
				return err
			}
			verb := "kept the CA in"
			if created {
				verb = "created a CA in"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", verb, args[0])
			return nil
		}),
	}
	cmd.Flags().StringVar(&name, "name", "Strata CA", "the CA's common name")
	cmd.Flags().IntVar(&days, "days", 3650, "how long the CA is valid, in days")
	return cmd
}

func newCertIssueCommand() *cobra.Command {
	var caDir, out, owner string
	var days int
	var keepValid bool
	cmd := &cobra.Command{
		Use:   "issue --ca DIR SPEC...",
		Short: "Issue certificates from the CA in --ca, one per SPEC [PATH=]ROLE:NAME[:HOST,...]",
		Long: `Signs one certificate per SPEC with the CA in --ca (ca.crt, ca.key) and writes
OUT/PATH.crt, OUT/PATH.key (readable by its owner only) and the CA's certificate as
ca.crt beside them. SPEC is [PATH=]ROLE:NAME[:HOST,...]:

  ROLE   metad, bookie, broker, admin or user (what the certificate may call)
  NAME   a node's id (--id), or the user name of admin and user certificates
  HOST   the DNS names and IP addresses the holder is dialled at
  PATH   where it goes under --out, without extension (default NAME)

e.g. strata cert issue --ca ca --out tls metad-1/node=metad:1:10.0.0.11,metad-1 admin=admin:alice
--keep-valid leaves a certificate in place when it is still right (same CA, role, name
and hosts) and has a third of --days left, so running the same command again is a no-op
that renews what is about to expire.`,
		Args: cobra.MinimumNArgs(1),
		RunE: cli.Run(func(cmd *cobra.Command, args []string) error {
			if caDir == "" || days <= 0 {
				return cli.Exit(cli.ExitUsage, errors.New("give --ca DIR and a positive --days"))
			}
			var specs []certs.Spec
			for _, a := range args {
				sp, err := certs.ParseSpec(a)
				if err != nil {
					return cli.Exit(cli.ExitUsage, err)
				}
				specs = append(specs, sp)
			}
			o := certs.Options{Out: out, Validity: time.Duration(days) * day, KeepValid: keepValid}
			if owner != "" {
				own, err := parseOwner(owner)
				if err != nil {
					return cli.Exit(cli.ExitUsage, err)
				}
				o.Owner = &own
			}
			ca, err := certs.LoadCA(caDir)
			if err != nil {
				return err
			}
			for _, sp := range specs {
				kept, err := certs.Issue(ca, sp, o)
				if err != nil {
					return fmt.Errorf("%s %s: %w", sp.Role, sp.Name, err)
				}
				verb := "issued"
				if kept {
					verb = "kept"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s.crt: role %s, name %s, hosts %s\n", verb, sp.Path, sp.Role, sp.Name, strings.Join(sp.Hosts, ","))
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&caDir, "ca", "", "directory of the CA (ca.crt, ca.key), as 'strata cert ca' makes it")
	cmd.Flags().StringVar(&out, "out", ".", "directory the SPEC paths are relative to")
	cmd.Flags().IntVar(&days, "days", 365, "how long each certificate is valid, in days")
	cmd.Flags().BoolVar(&keepValid, "keep-valid", false, "keep certificates that are still right and have a third of --days left")
	cmd.Flags().StringVar(&owner, "owner", "", "UID:GID to give the files written (when run as root for a node that is not)")
	return cmd
}

func parseOwner(s string) (certs.Owner, error) {
	u, gr, ok := strings.Cut(s, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(gr)
	if !ok || err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return certs.Owner{}, fmt.Errorf("--owner %q: want UID:GID, numbers", s)
	}
	return certs.Owner{UID: uid, GID: gid}, nil
}

func newCertKubernetesCommand(g *globalOptions) *cobra.Command {
	o := certs.SecretsOptions{}
	var namespace string
	var caDays, days int
	cmd := &cobra.Command{
		Use:   "kubernetes --ca-secret NAME [--create-ca] [--admin-secret NAME]",
		Short: "Keep a CA and an admin certificate in Kubernetes Secrets (run in a pod; the Helm chart's Job)",
		Long: `Run in a pod whose service account may get and create Secrets: makes the Secrets
that do not exist and keeps those that do.

  --ca-secret NAME     the CA (keys ca.crt, ca.key); with --create-ca a new CA is made
                       when it is missing, otherwise a missing one is an error
  --admin-secret NAME  a kubernetes.io/tls Secret (ca.crt, tls.crt, tls.key) with a
                       certificate of role admin named --admin-name, issued from the CA

Pods then issue their own certificates from the CA Secret ('strata cert issue' in an
init container), so each carries its pod's name and addresses.`,
		Args: cobra.NoArgs,
		RunE: cli.Run(func(cmd *cobra.Command, _ []string) error {
			if o.CASecret == "" || caDays <= 0 || days <= 0 {
				return cli.Exit(cli.ExitUsage, errors.New("give --ca-secret, and positive --ca-days and --days"))
			}
			o.CAValidity, o.AdminValidity = time.Duration(caDays)*day, time.Duration(days)*day
			k, err := certs.InCluster(certs.ServiceAccountDir, namespace)
			if err != nil {
				return err
			}
			ctx, cancel := g.commandContext(cmd)
			defer cancel()
			done, err := certs.EnsureSecrets(ctx, k, o)
			for _, line := range done {
				fmt.Fprintln(cmd.OutOrStdout(), line)
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.CASecret, "ca-secret", "", "the Secret holding the CA")
	f.BoolVar(&o.CreateCA, "create-ca", false, "make a new CA when --ca-secret does not exist")
	f.StringVar(&o.CAName, "ca-name", "Strata CA", "the common name of a new CA")
	f.IntVar(&caDays, "ca-days", 3650, "how long a new CA is valid, in days")
	f.StringVar(&o.AdminSecret, "admin-secret", "", "the Secret holding the admin certificate (none when empty)")
	f.StringVar(&o.AdminName, "admin-name", "admin", "the admin certificate's name (its principal is User:NAME)")
	f.IntVar(&days, "days", 365, "how long a new admin certificate is valid, in days")
	f.StringToStringVar(&o.Labels, "label", nil, "a label KEY=VALUE for the Secrets created (repeatable)")
	f.StringVar(&namespace, "namespace", "", "the namespace (default: the pod's own)")
	return cmd
}
