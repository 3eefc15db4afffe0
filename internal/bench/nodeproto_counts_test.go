package bench

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"substrate.dev/ate/internal/testport"
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

// waitSampler samples what the benchmark database's active backends are
// waiting on (pg_stat_activity's wait_event_type and wait_event; "CPU"
// when on none) every waitSampleEvery while a run lasts: the evidence
// for where a wake-up's time goes inside PostgreSQL.
type waitSampler struct {
	stop    context.CancelFunc
	done    chan struct{}
	samples map[string]int // by "type:event"; written by the sampler until done
	rounds  int
	err     error
}

const waitSampleEvery = 10 * time.Millisecond

// sampleWaits starts sampling url's database; end stops it.
func sampleWaits(url string) *waitSampler {
	ctx, stop := context.WithCancel(context.Background())
	w := &waitSampler{stop: stop, done: make(chan struct{}), samples: map[string]int{}}
	go func() {
		defer close(w.done)
		// An error after stop is the stop's doing, not a failure: with
		// -benchtime 1x a run can end before the sampler has connected.
		fail := func(err error) {
			if ctx.Err() == nil {
				w.err = err
			}
		}
		// From the postgres database, so that the sampler's own
		// statements are not counted as the benchmark database's.
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			fail(err)
			return
		}
		db := cfg.Database
		cfg.Database = "postgres"
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			fail(err)
			return
		}
		defer conn.Close(context.Background())
		tick := time.NewTicker(waitSampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rows, err := conn.Query(ctx, `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU')
				FROM pg_stat_activity
				WHERE datname = $1 AND state = 'active' AND backend_type = 'client backend'`, db)
			if err != nil {
				fail(err)
				return
			}
			events, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				fail(err)
				return
			}
			w.rounds++
			for _, e := range events {
				w.samples[e]++
			}
		}
	}()
	return w
}

// end stops the sampler and reports: pg-active-backends (the mean
// number of backends running a statement) and pg-lock-wait-share (the
// share of those samples waiting on a heavyweight lock) as metrics, and
// every wait event's share in the log (with -v).
func (w *waitSampler) end(b *testing.B) {
	w.stop()
	<-w.done
	if w.err != nil {
		b.Fatalf("sampling pg_stat_activity: %v", w.err)
	}
	if w.rounds == 0 {
		return
	}
	total, locks := 0, 0
	type share struct {
		event string
		n     int
	}
	var shares []share
	for e, n := range w.samples {
		total += n
		if strings.HasPrefix(e, "Lock:") {
			locks += n
		}
		shares = append(shares, share{e, n})
	}
	b.ReportMetric(float64(total)/float64(w.rounds), "pg-active-backends")
	if total == 0 {
		return
	}
	b.ReportMetric(float64(locks)/float64(total), "pg-lock-wait-share")
	if !testing.Verbose() {
		return // the metrics only; -v adds the detail
	}
	slices.SortFunc(shares, func(x, y share) int { return y.n - x.n })
	var sb strings.Builder
	for _, s := range shares {
		fmt.Fprintf(&sb, " %s %.1f%%", s.event, 100*float64(s.n)/float64(total))
	}
	b.Logf("pg wait events over %d samples of %d rounds:%s", total, w.rounds, sb.String())
}

// stmtStats are one statement's pg_stat_statements counters.
type stmtStats struct{ calls, ms float64 }

// pgStatements reads pg_stat_statements' calls and execution time of
// url's database by statement text.
func pgStatements(ctx context.Context, url string) (map[string]stmtStats, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT s.query, sum(s.calls)::float8, sum(s.total_exec_time)::float8
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
		WHERE d.datname = current_database() GROUP BY s.query`)
	if err != nil {
		return nil, err
	}
	out := map[string]stmtStats{}
	for rows.Next() {
		var q string
		var st stmtStats
		if err := rows.Scan(&q, &st.calls, &st.ms); err != nil {
			return nil, err
		}
		out[q] = st
	}
	return out, rows.Err()
}

// logStatements logs (with -v), per wake-up of n, the statements run between two
// pgStatements readings, most frequent first, with the mean time the
// server spent executing each: what a wake-up costs the database,
// statement by statement.
func logStatements(b *testing.B, before, after map[string]stmtStats, n int) {
	if !testing.Verbose() {
		return
	}
	type stmt struct {
		q         string
		calls, ms float64
	}
	var ss []stmt
	for q, st := range after {
		if d := st.calls - before[q].calls; d > 0 {
			ss = append(ss, stmt{strings.Join(strings.Fields(q), " "), d / float64(n), (st.ms - before[q].ms) / d})
		}
	}
	slices.SortFunc(ss, func(x, y stmt) int { return cmp.Compare(y.calls, x.calls) })
	var sb strings.Builder
	for _, s := range ss {
		if s.calls < 0.05 {
			break
		}
		q := s.q
		if len(q) > 100 {
			q = q[:100] + "…"
		}
		fmt.Fprintf(&sb, "\n  %5.2f × %6.3f ms  %s", s.calls, s.ms, q)
	}
	b.Logf("statements per wake-up (calls × mean execution time):%s", sb.String())
}
