package acl

import (
	"strings"
	"testing"
)

func rule(perm Permission, principal string, op Operation, rt ResourceType, name string, pattern PatternType) Rule {
	return Rule{Principal: principal, Permission: perm, Operation: op, Resource: rt, Name: name, Pattern: pattern}
}

func TestAuthorize(t *testing.T) {
	rules := []Rule{
		rule(Allow, "User:alice", Write, Topic, "orders", Literal),
		rule(Allow, "User:alice", Read, Topic, "logs-", Prefixed),
		rule(Deny, "User:alice", Read, Topic, "logs-secret", Literal),
		rule(Allow, "User:*", Describe, Topic, "public", Literal),
		rule(Allow, "User:bob", All, Group, "g-", Prefixed),
		rule(Deny, "User:*", All, Group, "g-locked", Literal),
		rule(Allow, "User:carol", Create, Cluster, ClusterName, Literal),
		rule(Allow, "User:dave", Read, Topic, "*", Literal),
		rule(Allow, "User:eve", Write, Topic, "__", Prefixed),
	}
	a := NewAuthorizer(rules, []string{"User:root"})
	for _, tc := range []struct {
		principal string
		super     bool
		op        Operation
		res       Resource
		allowed   bool
		reason    string
	}{
		{"User:alice", false, Write, TopicResource("orders"), true, "allowed by rule"},
		{"User:alice", false, Read, TopicResource("orders"), false, "no ACL allows it"},
		{"User:alice", false, Describe, TopicResource("orders"), true, "write"}, // AC4
		{"User:alice", false, Write, TopicResource("orders2"), false, "no ACL"}, // literal
		{"User:alice", false, Read, TopicResource("logs-app"), true, "prefixed"},
		{"User:alice", false, Read, TopicResource("log"), false, "no ACL"},
		{"User:alice", false, Read, TopicResource("logs-secret"), false, "denied by rule"}, // deny beats allow
		{"User:alice", false, Describe, TopicResource("logs-secret"), true, ""},            // a deny of read does not deny describe
		{"User:zed", false, Describe, TopicResource("public"), true, ""},                   // User:*
		{"User:zed", false, Read, TopicResource("public"), false, ""},
		{"User:bob", false, Read, GroupResource("g-1"), true, ""},
		{"User:bob", false, Delete, GroupResource("g-1"), true, ""},
		{"User:bob", false, Read, GroupResource("g-locked"), false, "denied by rule"}, // User:* deny beats bob's allow
		{"User:bob", false, Read, TopicResource("g-1"), false, ""},                    // another resource type
		{"User:carol", false, Create, ClusterResource, true, ""},
		{"User:carol", false, Alter, ClusterResource, false, ""},
		{"User:dave", false, Read, TopicResource("anything"), true, ""}, // literal "*"
		{"User:root", false, Delete, TopicResource("x"), true, "super-user"},
		{"User:someone", true, Alter, ClusterResource, true, "super-user"},
		{"User:root", false, Read, GroupResource("g-locked"), true, "super-user"}, // super-users pass denies
		// AC1: internal topics are never written, whatever the rules.
		{"User:root", false, Write, TopicResource("__consumer_offsets"), false, "internal"},
		{"User:admin", true, Write, TopicResource("__consumer_offsets"), false, "internal"},
		{"User:eve", false, Write, TopicResource("__consumer_offsets"), false, "internal"},
		{"User:root", false, Delete, TopicResource("__consumer_offsets"), false, "internal"},
		{"User:root", false, Read, TopicResource("__consumer_offsets"), true, ""},
	} {
		d := a.Authorize(tc.principal, tc.super, tc.op, tc.res)
		if d.Allowed != tc.allowed || !strings.Contains(d.Reason, tc.reason) {
			t.Errorf("%s super=%v %s %s: %+v, want allowed=%v reason ~%q", tc.principal, tc.super, tc.op, tc.res, d, tc.allowed, tc.reason)
		}
	}
}

func TestRuleValidateAndStore(t *testing.T) {
	good := rule(Allow, "User:a", Read, Group, "team/1", Prefixed)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if strings.Count(good.Key(), "/") != strings.Count(ACLsPrefix, "/") {
		t.Errorf("key %q has a '/' of its own", good.Key())
	}
	back, err := Unmarshal(good.Marshal())
	if err != nil || back != good {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	if other := rule(Deny, "User:a", Read, Group, "team/1", Prefixed); other.Key() == good.Key() {
		t.Error("allow and deny share a key")
	}
	for _, bad := range []Rule{
		rule(Allow, "alice", Read, Topic, "t", Literal),
		rule(Allow, "User:", Read, Topic, "t", Literal),
		rule("maybe", "User:a", Read, Topic, "t", Literal),
		rule(Allow, "User:a", "fly", Topic, "t", Literal),
		rule(Allow, "User:a", Read, "table", "t", Literal),
		rule(Allow, "User:a", Read, Topic, "", Literal),
		rule(Allow, "User:a", Read, Topic, "t", "glob"),
		rule(Allow, "User:a", Create, Cluster, "other", Literal),
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
	for _, name := range []string{"", "*", "a/b", "a:b", "a\nb"} {
		if ValidUserName(name) == nil {
			t.Errorf("user name %q accepted", name)
		}
	}
}
