package access

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/internal/scram"
	"github.com/strata-log/strata/proto/metadpb"
)

// RuleSpec is an ACL as `strata acl add|remove` names it with flags.
type RuleSpec struct {
	Allow, Deny, Cluster, Prefixed bool
	Principal, Operation           string
	Topic, Group                   string
}

// Rule is the ACL the flags name; an error says which flags are missing,
// clash or are invalid.
func (f RuleSpec) Rule() (acl.Rule, error) {
	r := acl.Rule{Principal: f.Principal, Operation: acl.Operation(f.Operation), Pattern: acl.Literal}
	switch {
	case f.Allow == f.Deny:
		return r, errors.New("give one of --allow and --deny")
	case f.Allow:
		r.Permission = acl.Allow
	default:
		r.Permission = acl.Deny
	}
	if n := btoi(f.Topic != "") + btoi(f.Group != "") + btoi(f.Cluster); n != 1 {
		return r, errors.New("give one of --topic NAME, --group NAME and --cluster")
	}
	switch {
	case f.Topic != "":
		r.Resource, r.Name = acl.Topic, f.Topic
	case f.Group != "":
		r.Resource, r.Name = acl.Group, f.Group
	default:
		r.Resource, r.Name = acl.Cluster, acl.ClusterName
		if f.Prefixed {
			return r, errors.New("--prefixed names topics or groups, not the cluster")
		}
	}
	if f.Prefixed {
		r.Pattern = acl.Prefixed
	}
	return r, r.Validate()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Rules decodes the ACLs listed under acl.ACLsPrefix, sorted by id;
// a value that does not decode is skipped with a line on warn.
func Rules(kvs []*metadpb.KeyValue, warn io.Writer) []acl.Rule {
	rules := []acl.Rule{}
	for _, kv := range kvs {
		r, err := acl.Unmarshal(kv.Value)
		if err != nil {
			fmt.Fprintf(warn, "strata: skipping %s: %v\n", kv.Key, err)
			continue
		}
		rules = append(rules, r)
	}
	sort.Slice(rules, func(i, j int) bool { return rules[i].ID() < rules[j].ID() })
	return rules
}

// PrintRules prints rules: a table, or a JSON array.
func PrintRules(p *cli.Printer, rules []acl.Rule) error {
	if p.Format == cli.FormatJSON {
		return p.JSON(rules)
	}
	tw := tabwriter.NewWriter(p.W, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PRINCIPAL\tPERMISSION\tOPERATION\tRESOURCE\tPATTERN\tNAME")
	for _, r := range rules {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Principal, r.Permission, r.Operation, r.Resource, r.Pattern, r.Name)
	}
	return tw.Flush()
}

// User is one user of `strata user list`: never its credential.
type User struct {
	Name       string `json:"name"`
	Mechanism  string `json:"mechanism"` // "invalid" when the credential does not decode
	Iterations int    `json:"iterations"`
}

// Users decodes the users listed under acl.UsersPrefix, sorted by name.
func Users(kvs []*metadpb.KeyValue) []User {
	rows := []User{}
	for _, kv := range kvs {
		r := User{Name: strings.TrimPrefix(kv.Key, acl.UsersPrefix), Mechanism: "invalid"}
		if cred, err := scram.Unmarshal(kv.Value); err == nil {
			r.Mechanism, r.Iterations = cred.Mechanism, cred.Iterations
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows
}

// PrintUsers prints users: a table, or a JSON array.
func PrintUsers(p *cli.Printer, users []User) error {
	if p.Format == cli.FormatJSON {
		return p.JSON(users)
	}
	tw := tabwriter.NewWriter(p.W, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tMECHANISM\tITERATIONS")
	for _, r := range users {
		fmt.Fprintf(tw, "%s\t%s\t%d\n", r.Name, r.Mechanism, r.Iterations)
	}
	return tw.Flush()
}
