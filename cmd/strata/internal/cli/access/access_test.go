package access

import (
	"bytes"
	"strings"
	"testing"

	"github.com/strata-log/strata/cmd/strata/internal/cli"
	"github.com/strata-log/strata/internal/acl"
	"github.com/strata-log/strata/internal/scram"
	"github.com/strata-log/strata/proto/metadpb"
)

func TestRuleSpec(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    RuleSpec
		want    acl.Rule
		wantErr string
	}{
		{"allow topic", RuleSpec{Allow: true, Principal: "User:alice", Operation: "read", Topic: "orders"},
			acl.Rule{Principal: "User:alice", Permission: acl.Allow, Operation: acl.Operation("read"), Resource: acl.Topic, Pattern: acl.Literal, Name: "orders"}, ""},
		{"deny prefixed group", RuleSpec{Deny: true, Principal: "User:*", Operation: "all", Group: "etl-", Prefixed: true},
			acl.Rule{Principal: "User:*", Permission: acl.Deny, Operation: acl.Operation("all"), Resource: acl.Group, Pattern: acl.Prefixed, Name: "etl-"}, ""},
		{"cluster", RuleSpec{Allow: true, Principal: "User:ops", Operation: "create", Cluster: true},
			acl.Rule{Principal: "User:ops", Permission: acl.Allow, Operation: acl.Operation("create"), Resource: acl.Cluster, Pattern: acl.Literal, Name: acl.ClusterName}, ""},
		{"both", RuleSpec{Allow: true, Deny: true, Topic: "t"}, acl.Rule{}, "give one of --allow and --deny"},
		{"no resource", RuleSpec{Allow: true}, acl.Rule{}, "give one of --topic NAME, --group NAME and --cluster"},
		{"two resources", RuleSpec{Allow: true, Topic: "t", Cluster: true}, acl.Rule{}, "give one of --topic"},
		{"prefixed cluster", RuleSpec{Allow: true, Cluster: true, Prefixed: true}, acl.Rule{}, "--prefixed names topics or groups"},
	} {
		got, err := tc.spec.Rule()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestRulesAndUsers(t *testing.T) {
	r1, _ := RuleSpec{Allow: true, Principal: "User:bob", Operation: "write", Topic: "t"}.Rule()
	r2, _ := RuleSpec{Allow: true, Principal: "User:alice", Operation: "read", Topic: "t"}.Rule()
	var warn bytes.Buffer
	rules := Rules([]*metadpb.KeyValue{{Key: r1.Key(), Value: r1.Marshal()}, {Key: "/bad", Value: []byte("{")}, {Key: r2.Key(), Value: r2.Marshal()}}, &warn)
	if len(rules) != 2 || rules[0].ID() > rules[1].ID() || !strings.HasPrefix(warn.String(), "strata: skipping /bad: ") {
		t.Fatalf("%+v, warn %q", rules, warn.String())
	}
	var out bytes.Buffer
	if err := PrintRules(&cli.Printer{W: &out, Format: cli.FormatText}, rules[:1]); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "PRINCIPAL   PERMISSION  OPERATION  RESOURCE  PATTERN  NAME\n") {
		t.Fatalf("%q", out.String())
	}

	cred, err := scram.NewCredential("alice", "secret-password", scram.MinIterations)
	if err != nil {
		t.Fatal(err)
	}
	users := Users([]*metadpb.KeyValue{{Key: acl.UserKey("zed"), Value: []byte("junk")}, {Key: acl.UserKey("alice"), Value: cred.Marshal()}})
	if len(users) != 2 || users[0] != (User{"alice", cred.Mechanism, scram.MinIterations}) || users[1] != (User{"zed", "invalid", 0}) {
		t.Fatalf("%+v", users)
	}
	out.Reset()
	if err := PrintUsers(&cli.Printer{W: &out, Format: cli.FormatJSON}, users); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "secret") || !strings.Contains(out.String(), `{"name":"zed","mechanism":"invalid","iterations":0}`) {
		t.Fatalf("%s", out.String())
	}
}
