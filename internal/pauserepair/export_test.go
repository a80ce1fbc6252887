package pauserepair

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// RunOnce is one round of Run.
func (r *Repairer) RunOnce(ctx context.Context) ([]Missed, error) { return r.runOnce(ctx) }

// SetBeforeLock and SetAfterLock set the test seams of repair.
func (r *Repairer) SetBeforeLock(f func())      { r.beforeLock = f }
func (r *Repairer) SetAfterLock(f func(pgx.Tx)) { r.afterLock = f }

// SetNow sets the clock of the repeats' ends.
func (r *Repairer) SetNow(now func() time.Time) { r.now = now }
