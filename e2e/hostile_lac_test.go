package e2e

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/strata-log/strata/client"
	"github.com/strata-log/strata/e2e/loadtest"
	"github.com/strata-log/strata/internal/mtls"
	"github.com/strata-log/strata/internal/pki"
	"github.com/strata-log/strata/internal/proctest"
	"github.com/strata-log/strata/internal/testwait"
	"github.com/strata-log/strata/ledger"
	"github.com/strata-log/strata/ledger/ledgermetad"
	"github.com/strata-log/strata/metad/metaclient"
	"github.com/strata-log/strata/proto/bookiepb"
	"github.com/strata-log/strata/proto/ledgerpb"
)

// TestHostileForgedLACAdd: a client holding a broker certificate sends
// forged adds straight to every bookie of a partition's open ledger, to
// make their LACs name entries nobody has (before, one add of entry N
// carrying LAC N left the next owner's recovery waiting for them forever).
// Without the ledger's digest key the bookies keep no LAC on their account
// (H2 in ledger/storage/doc.go); with the key, which a broker certificate
// can read from metad, they cannot tell (V2 in ledger/doc.go). The owner
// is then killed: the other broker recovers the partition, drops the
// forged LACs (R10 in ledger/recovery_machine.go), and serves every
// acknowledged record, and only those, and takes new ones.
func TestHostileForgedLACAdd(t *testing.T) {
	skipShort(t)
	ca := newTestPKI(t, "strata e2e CA")
	meta := proctest.StartMetad(t, bins["metad"], 3, tlsArgs(ca.issue(pki.Request{Role: pki.RoleMetad, Name: "metad"}))...)
	var bookies []*proctest.BookieNode
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("b%d", i) // a node's certificate is named by its id
		bookies = append(bookies, proctest.StartBookie(t, bins["bookie"], meta, id, tlsArgs(ca.issue(pki.Request{Role: pki.RoleBookie, Name: id}))...))
	}
	var brokers []*proctest.BrokerNode
	for _, id := range []string{"k1", "k2"} {
		cert := ca.issue(pki.Request{Role: pki.RoleBroker, Name: id})
		brokers = append(brokers, proctest.StartBroker(t, bins["broker"], meta, id, tlsArgs(cert)...))
	}
	mallory := ca.issue(pki.Request{Role: pki.RoleBroker, Name: "mallory"}) // a stolen or rogue broker certificate
	admin := ca.issue(pki.Request{Role: pki.RoleAdmin, Name: "root"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := client.New(ctx, client.Config{Brokers: []string{brokers[0].Listen, brokers[1].Listen}, ClientID: t.Name(),
		RequestTimeout: 5 * time.Second, TLSCAFile: admin.CA, TLSCertFile: admin.Cert, TLSKeyFile: admin.Key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	createTopic(t, cl, "forged", 1, nil)
	p, err := cl.NewProducer(client.ProducerConfig{Acks: client.AcksQuorum})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	var acked []string
	produce := func(n int) {
		t.Helper()
		for range n {
			v := "v" + strconv.Itoa(len(acked))
			if _, err := p.ProduceSync(ctx, &client.Record{Topic: "forged", Partition: 0, Value: []byte(v)}); err != nil {
				t.Fatal(err)
			}
			acked = append(acked, v)
		}
	}
	produce(100)

	md := openLedgerOf(ctx, t, cl, meta, mallory, "forged")
	ensemble := md.Fragments[len(md.Fragments)-1].Bookies
	t.Logf("partition forged/0 writes ledger %d on %v; the broker certificate read its digest key", md.Id, ensemble)
	const far = 1_000_000
	for _, addr := range ensemble {
		forgeLACs(ctx, t, bookiepb.NewBookieClient(dial(t, addr, mallory)), md, far)
	}
	scrape := adminHTTPS(t, admin) // a TLS node's /metrics needs an admin certificate
	for _, b := range bookies {
		if n, err := metricValueWith(scrape, "https://"+b.AdminAddr+"/metrics", "strata_bookie_add_digest_mismatches_total"); err != nil || n < 1 {
			t.Fatalf("bookie %s: strata_bookie_add_digest_mismatches_total %v, %v; want the forged add counted", b.ID, n, err)
		}
	}

	owner, err := ownerOf(ctx, cl, "forged", 0)
	if err != nil {
		t.Fatal(err)
	}
	var victim, heir *proctest.BrokerNode
	for _, b := range brokers {
		if b.Listen == owner {
			victim = b
		} else {
			heir = b
		}
	}
	if victim == nil {
		t.Fatalf("owner %q is neither broker", owner)
	}
	victim.Kill()
	killed := time.Now()
	testwait.UntilNil(t, 60*time.Second, "forged/0 served by the other broker with every record", func() error {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		resp, err := cl.ListOffsets(cctx, client.TopicPartition{Topic: "forged", Partition: 0}, -1)
		if err != nil {
			return err
		}
		if resp.Offset != int64(len(acked)) {
			return fmt.Errorf("high watermark %d, want %d", resp.Offset, len(acked))
		}
		return nil
	})
	t.Logf("%s took forged/0 over %v after %s was killed", heir.ID, time.Since(killed).Round(time.Millisecond), victim.ID)
	if n, err := metricValueWith(scrape, "https://"+heir.AdminAddr+"/metrics", "strata_ledger_recovery_lacs_distrusted_total"); err != nil || n < 1 {
		t.Fatalf("%s: strata_ledger_recovery_lacs_distrusted_total %v, %v; want the forged LACs reported", heir.ID, n, err)
	}
	produce(10)
	recs := loadtest.ReadAll(t, cl, "forged", 1)[0]
	if len(recs) != len(acked) {
		t.Fatalf("read %d records, want the %d acknowledged", len(recs), len(acked))
	}
	for i, r := range recs {
		if r.Offset != int64(i) || string(r.Value) != acked[i] {
			t.Fatalf("offset %d holds %q at %d, want %q", i, r.Value, r.Offset, acked[i])
		}
	}
	t.Logf("%d acknowledged records read back, in order, nothing else", len(recs))
}

// openLedgerOf returns the metadata of the open ledger of topic's
// partition 0, read from metad with cert (a broker's may read it, digest
// key included).
func openLedgerOf(ctx context.Context, t *testing.T, cl *client.Client, meta *proctest.MetadCluster, cert pki.Files, topic string) *ledgerpb.LedgerMetadata {
	t.Helper()
	desc, err := cl.DescribeTopic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ledgers := desc.Partitions[0].Ledgers
	if len(ledgers) == 0 || ledgers[len(ledgers)-1].Closed {
		t.Fatalf("%s/0 has no open ledger: %v", topic, ledgers)
	}
	creds, err := mtls.Load(cert)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := metaclient.New(metaclient.Config{Endpoints: meta.Endpoints(), Credentials: creds.Transport(), RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mc.Close() })
	md, _, err := ledgermetad.NewStore(mc).Get(ctx, ledgers[len(ledgers)-1].LedgerId)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.GetDigestKey()) == 0 {
		t.Fatalf("ledger %d has no digest key", md.Id)
	}
	return md
}

// forgeLACs sends one bookie of md's ensemble an add of entry far carrying
// LAC far, forged without the digest key: the bookie stores it and keeps
// its LAC within the writer's entries; then adds of entries far+1 and
// far+2 sealed with the key, carrying LACs far and far+1: the bookie
// cannot tell them from the writer's and keeps LAC far+1.
func forgeLACs(ctx context.Context, t *testing.T, c bookiepb.BookieClient, md *ledgerpb.LedgerMetadata, far int64) {
	t.Helper()
	before, err := c.ReadLAC(ctx, &bookiepb.ReadLACRequest{LedgerId: md.Id})
	if err != nil {
		t.Fatal(err)
	}
	add := func(entry, lac int64, payload []byte) {
		t.Helper()
		resp, err := sendAdd(ctx, c, &bookiepb.AddRequest{RequestId: 1, LedgerId: md.Id, EntryId: uint64(entry), Lac: lac, Payload: payload})
		if err != nil || resp.Status != bookiepb.AddStatus_ADD_OK {
			t.Fatalf("forged add of entry %d: %v, %v", entry, resp, err)
		}
	}
	lac := func() int64 {
		t.Helper()
		resp, err := c.ReadLAC(ctx, &bookiepb.ReadLACRequest{LedgerId: md.Id})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Lac
	}
	add(far, far, []byte("forged without the key"))
	if got := lac(); got > before.LastEntryId {
		t.Fatalf("after a forged add of entry %d with LAC %d: LAC %d, past the writer's last entry %d", far, far, got, before.LastEntryId)
	}
	for _, e := range []int64{far + 1, far + 2} {
		sealed, err := ledger.SealEntry(md, e, []byte("forged with the key"))
		if err != nil {
			t.Fatal(err)
		}
		add(e, e-1, sealed)
	}
	if got := lac(); got != far+1 {
		t.Fatalf("after adds sealed with the key: LAC %d, want %d (a key holder can forge, V2)", got, far+1)
	}
}
