package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

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

// TestKafkaGroupsACL runs a TLS cluster whose Kafka listener requires
// SASL. A SCRAM user allowed to READ a topic, but nothing on the group,
// cannot use the group (GROUP_AUTHORIZATION_FAILED); with DESCRIBE on the
// group kadm describes it but JoinGroup is still refused; with READ the
// user's consumer joins, reads and commits; deleting the group needs
// DELETE.
func TestKafkaGroupsACL(t *testing.T) {
	skipShort(t)
	const user, password, group, topic = "kgroup-user", "kgroup-secret", "acl-group", "acl-orders"
	c := startTLSCluster(t)
	admin := c.pki.issue(pki.Request{Role: pki.RoleAdmin, Name: "root"})
	asAdmin := aclCLI{t: t, c: c, files: admin}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	adminCl, err := c.client(ctx, t, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer adminCl.Close()
	createTopic(t, adminCl, topic, 2, nil)
	produceN(t, adminCl, topic, 2, "acl", 0, 20)
	asAdmin.must(password+"\n", "user", "create", user, "--password-stdin")
	allow := func(op string, resource ...string) {
		t.Helper()
		asAdmin.must("", append([]string{"acl", "add", "--allow", "--principal", "User:" + user, "--operation", op}, resource...)...)
	}
	allow("read", "--topic", topic)

	addrs := []string{c.broker.KafkaAddr}
	opts := scramOpts(t, c, user, password)
	adm := groupKafkaAdmin(t, addrs, opts...)
	testwait.UntilNil(t, 20*time.Second, "the user to log in and read the topic's end offsets", func() error {
		_, err := groupEnds(ctx, adm, topic)
		return err
	})

	t.Run("no group ACL", func(t *testing.T) {
		m := startFranzMember(t, addrs, group, topic, "acl-member", opts...)
		testwait.UntilNil(t, 20*time.Second, "the member to be refused the group", func() error {
			for _, err := range m.errors() {
				if groupAuthFailed(err) {
					return nil
				}
			}
			return fmt.Errorf("group errors %v", m.errors())
		})
		m.close()
		if read := m.offsets(); len(read) != 0 {
			t.Errorf("a member refused the group read %v", read)
		}
		if _, err := describeKafkaGroup(ctx, adm, group); !groupAuthFailed(err) {
			t.Errorf("describe without DESCRIBE on the group: %v, want GROUP_AUTHORIZATION_FAILED", err)
		}
	})

	t.Run("DESCRIBE", func(t *testing.T) {
		allow("describe", "--group", group)
		testwait.UntilNil(t, 10*time.Second, "kadm to describe the group", func() error {
			d, err := describeKafkaGroup(ctx, adm, group)
			if err == nil && d.State != "Dead" {
				err = fmt.Errorf("state %s of a group never joined, want Dead", d.State)
			}
			return err
		})
		// The coordinator is found now (FindCoordinator needs DESCRIBE),
		// and JoinGroup itself is refused: it needs READ.
		cl := groupKafkaClient(t, addrs, opts...)
		join := kmsg.NewPtrJoinGroupRequest()
		join.Group, join.ProtocolType, join.SessionTimeoutMillis, join.RebalanceTimeoutMillis = group, "consumer", 6000, 6000
		proto := kmsg.NewJoinGroupRequestProtocol()
		proto.Name, proto.Metadata = "range", (&kmsg.ConsumerMemberMetadata{Topics: []string{topic}}).AppendTo(nil)
		join.Protocols = append(join.Protocols, proto)
		resp, err := join.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); !groupAuthFailed(err) {
			t.Fatalf("JoinGroup with DESCRIBE only: %v, want GROUP_AUTHORIZATION_FAILED", err)
		}
	})

	t.Run("READ", func(t *testing.T) {
		allow("read", "--group", group)
		// A member refused before the ACL reaches the broker retries.
		m := startFranzMember(t, addrs, group, topic, "acl-member", opts...)
		testwait.UntilNil(t, 30*time.Second, "a member to join and read everything", func() error {
			if n := len(m.valuesRead()); n != 20 {
				return fmt.Errorf("%d of 20 read; group errors %v", n, m.errors())
			}
			return nil
		})
		testwait.UntilNil(t, 10*time.Second, "the member's commits", func() error {
			committed, err := groupCommitted(ctx, adm, group, topic)
			if err == nil && (committed[0] != 10 || committed[1] != 10) {
				err = fmt.Errorf("committed %v", committed)
			}
			return err
		})
		d, err := describeKafkaGroup(ctx, adm, group)
		if err != nil || d.State != "Stable" || len(d.Members) != 1 || d.Members[0].ClientID != "acl-member" {
			t.Fatalf("described %+v %v, want the member", d, err)
		}
		m.close()
	})

	t.Run("DELETE", func(t *testing.T) {
		testwait.UntilNil(t, 10*time.Second, "the group to be empty", func() error {
			d, err := describeKafkaGroup(ctx, adm, group)
			if err == nil && d.State != "Empty" {
				err = fmt.Errorf("state %s", d.State)
			}
			return err
		})
		if _, err := adm.DeleteGroup(ctx, group); !groupAuthFailed(err) {
			t.Fatalf("delete without DELETE on the group: %v, want GROUP_AUTHORIZATION_FAILED", err)
		}
		allow("delete", "--group", group)
		testwait.UntilNil(t, 10*time.Second, "the group deleted", func() error {
			_, err := adm.DeleteGroup(ctx, group)
			return err
		})
		if d, err := describeKafkaGroup(ctx, adm, group); err != nil || d.State != "Dead" {
			t.Fatalf("after the delete: %+v %v, want Dead", d, err)
		}
		if committed, err := groupCommitted(ctx, adm, group, topic); err != nil || len(committed) != 0 {
			t.Fatalf("commits after the delete: %v %v", committed, err)
		}
	})
}
