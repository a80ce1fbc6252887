package process

import (
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Health is health for the external tests (package process_test, which
// may import testdb: testdb imports this package through scheduler).
type Health = health

func (h *health) Started(pool *pgxpool.Pool, stopped <-chan struct{}) { h.started(pool, stopped) }
func (h *health) Stopping()                                           { h.stopping() }
func (h *health) Healthz(w http.ResponseWriter, r *http.Request)      { h.healthz(w, r) }
func (h *health) Readyz(w http.ResponseWriter, r *http.Request)       { h.readyz(w, r) }
