package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/testwait"
)

// scramOpts are the options of a franz-go client that logs in to a TLS
// cluster's Kafka listener as user with SCRAM-SHA-256.
func scramOpts(t *testing.T, c *tlsCluster, user, password string) []kgo.Opt {
	t.Helper()
	caPEM, err := os.ReadFile(c.pki.caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate in " + c.pki.caFile)
	}
	return []kgo.Opt{kgo.DialTLSConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha256Mechanism())}
}

// groupAuthFailed reports whether err is GROUP_AUTHORIZATION_FAILED.
func groupAuthFailed(err error) bool { return errors.Is(err, kerr.GroupAuthorizationFailed) }

// groupACLSteps is what the steps of TestKafkaGroupsACL share: the user's
// Kafka clients' addresses and options, a kadm client logged in as the
// user, and allow, which adds an ACL for the user.
type groupACLSteps struct {
	ctx          context.Context
	addrs        []string
	opts         []kgo.Opt
	adm          *kadm.Client
	group, topic string
	allow        func(t *testing.T, op string, resource ...string)
}

// TestKafkaGroupsACL runs a TLS cluster whose Kafka listener requires
// SASL. A SCRAM user allowed to READ a topic, but nothing on the group,
// cannot use the group (GROUP_AUTHORIZATION_FAILED); with DESCRIBE on the
// group kadm describes it but JoinGroup is still refused; with READ the
// user's consumer joins, reads and commits; deleting the group needs
// DELETE.
func TestKafkaGroupsACL(t *testing.T) {
	skipShort(t)
	const user, password = "kgroup-user", "kgroup-secret"
	c := startTLSCluster(t)
	admin := c.pki.issue(pki.Request{Role: pki.RoleAdmin, Name: "root"})
	asAdmin := aclCLI{t: t, c: c, files: admin}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s := groupACLSteps{ctx: ctx, addrs: []string{c.broker.KafkaAddr}, opts: scramOpts(t, c, user, password), group: "acl-group", topic: "acl-orders"}
	adminCl, err := c.client(ctx, t, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer adminCl.Close()
	createTopic(t, adminCl, s.topic, 2, nil)
	produceN(t, adminCl, s.topic, 2, "acl", 0, 20)
	asAdmin.must(password+"\n", "user", "create", user, "--password-stdin")
	s.allow = func(t *testing.T, op string, resource ...string) {
		t.Helper()
		aclCLI{t: t, c: c, files: admin}.must("", append([]string{"acl", "add", "--allow", "--principal", "User:" + user, "--operation", op}, resource...)...)
	}
	s.allow(t, "read", "--topic", s.topic)
	s.adm = groupKafkaAdmin(t, s.addrs, s.opts...)
	testwait.UntilNil(t, 20*time.Second, "the user to log in and read the topic's end offsets", func() error {
		_, err := groupEnds(ctx, s.adm, s.topic)
		return err
	})
	for _, step := range []struct {
		name string
		fn   func(*testing.T)
	}{{"no group ACL", s.noGroupACL}, {"DESCRIBE", s.describe}, {"READ", s.read}, {"DELETE", s.delete}} {
		if !t.Run(step.name, step.fn) {
			return
		}
	}
}

// noGroupACL: a member is refused the group and reads nothing; kadm
// cannot describe the group.
func (s groupACLSteps) noGroupACL(t *testing.T) {
	m := startFranzMember(t, s.addrs, s.group, s.topic, "acl-member", s.opts...)
	testwait.UntilNil(t, 20*time.Second, "the member to be refused the group", func() error {
		if slices.ContainsFunc(m.errors(), groupAuthFailed) {
			return nil
		}
		return fmt.Errorf("group errors %v", m.errors())
	})
	m.close()
	if read := m.offsets(); len(read) != 0 {
		t.Errorf("a member refused the group read %v", read)
	}
	if _, err := describeKafkaGroup(s.ctx, s.adm, s.group); !groupAuthFailed(err) {
		t.Errorf("describe without DESCRIBE on the group: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}
}

// describe: with DESCRIBE on the group kadm describes it, and the
// coordinator is found (FindCoordinator needs DESCRIBE), but JoinGroup
// itself is refused: it needs READ.
func (s groupACLSteps) describe(t *testing.T) {
	s.allow(t, "describe", "--group", s.group)
	testwait.UntilNil(t, 10*time.Second, "kadm to describe the group", func() error {
		d, err := describeKafkaGroup(s.ctx, s.adm, s.group)
		if err == nil && d.State != "Dead" {
			err = fmt.Errorf("state %s of a group never joined, want Dead", d.State)
		}
		return err
	})
	join := kmsg.NewPtrJoinGroupRequest()
	join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = s.group, "consumer", 6000, 6000
	proto := kmsg.NewJoinGroupRequestProtocol()
	proto.Name, proto.Metadata = "range", (&kmsg.ConsumerMemberMetadata{Topics: []string{s.topic}}).AppendTo(nil)
	join.Protocols = append(join.Protocols, proto)
	resp, err := join.RequestWith(s.ctx, groupKafkaClient(t, s.addrs, s.opts...))
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); !groupAuthFailed(err) {
		t.Fatalf("JoinGroup with DESCRIBE only: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}
}

// read: with READ on the group a member joins, reads everything and
// commits; kadm describes it as the group's member.
func (s groupACLSteps) read(t *testing.T) {
	s.allow(t, "read", "--group", s.group)
	// A member refused before the ACL reaches the broker retries.
	m := startFranzMember(t, s.addrs, s.group, s.topic, "acl-member", s.opts...)
	testwait.UntilNil(t, 30*time.Second, "a member to join and read everything", func() error {
		if n := len(m.valuesRead()); n != 20 {
			return fmt.Errorf("%d of 20 read; group errors %v", n, m.errors())
		}
		return nil
	})
	waitKafkaCommitted(t, s.ctx, s.adm, s.group, s.topic, 2, 10)
	d, err := describeKafkaGroup(s.ctx, s.adm, s.group)
	if err != nil || d.State != "Stable" || len(d.Members) != 1 || d.Members[0].ClientID != "acl-member" {
		t.Fatalf("described %+v %v, want the member", d, err)
	}
	m.close()
}

// delete: deleting the (now empty) group needs DELETE on it.
func (s groupACLSteps) delete(t *testing.T) {
	testwait.UntilNil(t, 10*time.Second, "the group to be empty", func() error {
		d, err := describeKafkaGroup(s.ctx, s.adm, s.group)
		if err == nil && d.State != "Empty" {
			err = fmt.Errorf("state %s", d.State)
		}
		return err
	})
	if _, err := s.adm.DeleteGroup(s.ctx, s.group); !groupAuthFailed(err) {
		t.Fatalf("delete without DELETE on the group: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}
	s.allow(t, "delete", "--group", s.group)
	testwait.UntilNil(t, 10*time.Second, "the group deleted", func() error {
		_, err := s.adm.DeleteGroup(s.ctx, s.group)
		return err
	})
	if d, err := describeKafkaGroup(s.ctx, s.adm, s.group); err != nil || d.State != "Dead" {
		t.Fatalf("after the delete: %+v %v, want Dead", d, err)
	}
	if committed, err := groupCommitted(s.ctx, s.adm, s.group, s.topic); err != nil || len(committed) != 0 {
		t.Fatalf("commits after the delete: %v %v", committed, err)
	}
}
