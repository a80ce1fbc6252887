package migrate

import (
	"context"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DownTo rolls tierq's migrations back to version with goose (each
// migration's Down section): a schema as an older tierq left it.
func DownTo(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	provider, db, err := newProvider(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = provider.DownTo(ctx, version)
	return err
}
