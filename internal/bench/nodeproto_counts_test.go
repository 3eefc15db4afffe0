package bench

import (
	"context"
	"fmt"
	"net/http"
	"substrate.dev/ate/internal/testport"
	"testing"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// protoCounts are the cluster's counters BenchmarkNodeProtocol reports
// per wake-up, from the API servers' /metrics and, over PostgreSQL, the
// server's statistics views.
type protoCounts struct {
	// commits and writes: ate_store_commit_seconds' count and
	// ate_store_commit_writes' sum (bbolt group-commits several writes
	// in one transaction; PostgreSQL commits each alone).
	commits, writes float64
	// commitSeconds: ate_store_commit_seconds' sum, the time from a
	// transaction's begin to its commit (fsyncs included).
	commitSeconds float64
	// nodeRPCs: the API servers' calls to node agents (gRPC client,
	// service ate.v1.NodeAgent); registryRPCs: calls the nodes made to
	// them (gRPC server, ate.v1.NodeRegistry).
	nodeRPCs, registryRPCs float64
	// statements: pg_stat_statements' calls, every statement the
	// database ran (each a round trip, BEGIN and COMMIT included);
	// xacts: pg_stat_database's commits and rollbacks of the benchmark
	// database; walSyncs: pg_stat_wal's WAL flushes to disk.
	statements, xacts, walSyncs float64
}

func (c protoCounts) minus(o protoCounts) protoCounts {
	return protoCounts{c.commits - o.commits, c.writes - o.writes, c.commitSeconds - o.commitSeconds,
		c.nodeRPCs - o.nodeRPCs, c.registryRPCs - o.registryRPCs, c.statements - o.statements, c.xacts - o.xacts, c.walSyncs - o.walSyncs}
}

// report reports c per wake-up of n.
func (c protoCounts) report(b *testing.B, n int, postgres bool) {
	per := func(v float64) float64 { return v / float64(n) }
	b.ReportMetric(per(c.commits), "store-commits/wakeup")
	b.ReportMetric(per(c.writes), "store-writes/wakeup")
	if c.commits > 0 {
		b.ReportMetric(c.commitSeconds*1000/c.commits, "store-commit-mean-ms")
	}
	b.ReportMetric(per(c.nodeRPCs), "node-rpcs/wakeup")
	b.ReportMetric(per(c.registryRPCs), "registry-rpcs/wakeup")
	if postgres {
		b.ReportMetric(per(c.statements), "pg-statements/wakeup")
		b.ReportMetric(per(c.xacts), "pg-xacts/wakeup")
		b.ReportMetric(per(c.walSyncs), "pg-wal-syncs/wakeup")
	}
}

// freeAddr is testport.Addr.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	return testport.Addr(tb)
}

// scrape adds what the API server at management address addr counted.
func (c *protoCounts) scrape(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return fmt.Errorf("%s/metrics: %w", addr, err)
	}
	for _, m := range fams["ate_store_commit_seconds"].GetMetric() {
		c.commits += float64(m.GetHistogram().GetSampleCount())
		c.commitSeconds += m.GetHistogram().GetSampleSum()
	}
	for _, m := range fams["ate_store_commit_writes"].GetMetric() {
		c.writes += m.GetHistogram().GetSampleSum()
	}
	c.nodeRPCs += sumWhere(fams["grpc_client_handled_total"], "grpc_service", "ate.v1.NodeAgent")
	c.registryRPCs += sumWhere(fams["grpc_server_handled_total"], "grpc_service", "ate.v1.NodeRegistry")
	return nil
}

// sumWhere sums the counters of f whose label name is value.
func sumWhere(f *dto.MetricFamily, name, value string) float64 {
	var sum float64
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == name && l.GetValue() == value {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// readPG adds PostgreSQL's counters; url is the benchmark database's, as
// superuser. pg_stat_database and pg_stat_wal are flushed by each backend
// at most once a second, so short runs undercount them.
func (c *protoCounts) readPG(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var stmts, xacts, syncs float64
	err = conn.QueryRow(ctx, `SELECT
		(SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database())::float8,
		(SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database())::float8,
		(SELECT wal_sync FROM pg_stat_wal)::float8`).Scan(&stmts, &xacts, &syncs)
	if err != nil {
		return fmt.Errorf("postgres statistics: %w", err)
	}
	c.statements += stmts
	c.xacts += xacts
	c.walSyncs += syncs
	return nil
}
