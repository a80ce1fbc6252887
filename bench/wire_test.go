package bench

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tierq/tierq/internal/testdb"
)

// TestWireProxyCountsWhatAProcessSends: every statement a client sends
// through the proxy is counted once, prepared (each execution) or simple,
// alone or batched; River's fetch among them by its SQL; and the
// connections it holds.
func TestWireProxyCountsWhatAProcessSends(t *testing.T) {
	t.Parallel()
	testdb.New(t) // creates the test database if needed
	ctx := context.Background()
	proxy, err := newWireProxy(testdb.URL())
	require.NoError(t, err)
	proxy.serve()
	t.Cleanup(proxy.close)
	url, err := proxy.wireURL(testdb.URL(), "tierq_wire_test")
	require.NoError(t, err)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	var name string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&name))
	require.Equal(t, "tierq_wire_test", name)
	before := proxy.count()

	_, err = conn.Exec(ctx, `SELECT 1`) // simple protocol: no arguments
	require.NoError(t, err)
	fetch := fetchPrefix + ":many\nSELECT $1::int"
	for range 2 { // prepared once, executed twice
		var n int
		require.NoError(t, conn.QueryRow(ctx, fetch, 7).Scan(&n))
	}
	batch := &pgx.Batch{}
	batch.Queue(`SELECT $1::int`, 1)
	batch.Queue(fetch, 2)
	batch.Queue(`SELECT $1::text`, "x")
	require.NoError(t, conn.SendBatch(ctx, batch).Close())
	got := proxy.count()
	require.Equal(t, wireCount{statements: 6, fetches: 3}, wireCount{statements: got.statements - before.statements, fetches: got.fetches - before.fetches})

	other, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	require.Equal(t, int64(2), proxy.open.Load())
	require.NoError(t, other.Close(ctx))
	require.NoError(t, conn.Close(ctx))
	require.Eventually(t, func() bool { return proxy.open.Load() == 0 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(2), proxy.peak.Load())
}

func TestWithAppName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, give, want string
	}{
		{name: "url", give: "postgres://u@h:5432/db?sslmode=disable", want: "postgres://u@h:5432/db?application_name=w0&sslmode=disable"},
		{name: "url replaces", give: "postgres://h/db?application_name=psql", want: "postgres://h/db?application_name=w0"},
		{name: "keyword/value", give: "host=h dbname=db", want: "host=h dbname=db application_name=w0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := withAppName(tt.give, "w0")
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
