package api

// Tenant limits by tier (package limits, issue 33): the tiers' defaults the
// scheduler recorded, one tenant's limits and the day's use of its quota,
// and per-tenant overrides. Admin token. The tenant is a query parameter
// (id), not a path segment: a tenant id is any UTF-8 without control
// characters, "/", "." and ".." included, which a path would split or
// clean away.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tierq/tierq/jobmeta"
	"github.com/tierq/tierq/limits"
	"github.com/tierq/tierq/service"
	"github.com/tierq/tierq/tiers"
)

// ServiceLimits is one service's limits by tier in GET /v1/limits.
type ServiceLimits struct {
	Service string `json:"service"`
	// Tiers are the four tiers' defaults (zeros: no limit).
	Tiers limits.Tiers `json:"tiers"`
	// RecordedBy and RecordedAt say which process recorded them and when;
	// null when no scheduler has recorded the service's limits (it has
	// none by tier).
	RecordedBy *string    `json:"recorded_by"`
	RecordedAt *time.Time `json:"recorded_at"`
}

// listLimits is GET /v1/limits: the limits by tier of every service of the
// registry, as the scheduler recorded them.
func (s *Server) listLimits(w http.ResponseWriter, r *http.Request) {
	recorded, err := limits.ReadTiers(r.Context(), s.pool)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	out := []ServiceLimits{}
	for _, name := range s.cfg.Registry.Names() {
		sl := ServiceLimits{Service: name, Tiers: limits.Tiers{}}
		for _, rec := range recorded {
			if rec.Service == name {
				sl.Tiers = rec.Tiers
				sl.RecordedBy, sl.RecordedAt = &rec.RecordedBy, &rec.RecordedAt
			}
		}
		for _, tier := range tiers.All() {
			sl.Tiers[tier] = sl.Tiers[tier] // every tier, zeros when unset
		}
		out = append(out, sl)
	}
	writeJSON(w, http.StatusOK, map[string]any{"services": out})
}

// tenantOf reads the service path parameter (one of the registry's
// services: else 404) and the tenant, query parameter id (required, the
// rule for tenant ids: else 400). It writes the 4xx itself.
func (s *Server) tenantOf(w http.ResponseWriter, r *http.Request) (*service.Service, string, bool) {
	name := r.PathValue("service")
	svc, ok := s.cfg.Registry.Lookup(name)
	if !ok {
		writeError(w, http.StatusNotFound, "unknown service %.40q (want %s)", name, strings.Join(s.cfg.Registry.Names(), ", "))
		return nil, "", false
	}
	tenant := r.URL.Query().Get("id")
	if tenant == "" {
		writeError(w, http.StatusBadRequest, "query parameter id is required: the tenant id (a user_id)")
		return nil, "", false
	}
	if err := jobmeta.CheckTenant(tenant); err != nil {
		writeError(w, http.StatusBadRequest, "query parameter id: %v", err)
		return nil, "", false
	}
	return svc, tenant, true
}

// tenantLimits answers a tenant's limits and the day's use, for the tier
// of its subscription (free without one).
func (s *Server) tenantLimits(w http.ResponseWriter, r *http.Request, svc *service.Service, tenant string, status int) {
	ctx := r.Context()
	tier, _, err := s.tierFor(ctx, tenant)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	out, err := limits.Lookup(ctx, s.pool, svc.Name(), tier, tenant, time.Time{})
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	writeJSON(w, status, out)
}

// getTenantLimits is GET /v1/limits/{service}/tenant?id=TENANT.
func (s *Server) getTenantLimits(w http.ResponseWriter, r *http.Request) {
	svc, tenant, ok := s.tenantOf(w, r)
	if !ok {
		return
	}
	s.tenantLimits(w, r, svc, tenant, http.StatusOK)
}

// PatchLimitsRequest is PATCH /v1/limits/{service}/tenant's body: each
// field given sets the tenant's override of that limit (0: no limit for
// this tenant, "0" for the rate), null clears it (the tier's default
// applies again), and a field left out stays as it is.
type PatchLimitsRequest struct {
	MaxRunning json.RawMessage `json:"max_running"`
	Rate       json.RawMessage `json:"rate"`
	DailyQuota json.RawMessage `json:"daily_quota"`
}

// parse turns the request into what to set and what to clear.
func (p PatchLimitsRequest) parse() (set limits.Override, unset []limits.Kind, err error) {
	given := false
	field := func(raw json.RawMessage, kind limits.Kind, read func() error) error {
		switch {
		case len(raw) == 0:
			return nil
		case string(raw) == "null":
			given = true
			unset = append(unset, kind)
			return nil
		}
		given = true
		return read()
	}
	integer := func(raw json.RawMessage, name string, hi int64) (int64, error) {
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, fmt.Errorf("%s must be an integer from 0 to %d, or null, not %.40s", name, hi, raw)
		}
		return n, nil
	}
	err = errors.Join(
		field(p.MaxRunning, limits.KindMaxRunning, func() error {
			n, err := integer(p.MaxRunning, "max_running", limits.MaxMaxRunning)
			if err == nil {
				m := int(n) // its range is Validate's
				set.MaxRunning = &m
			}
			return err
		}),
		field(p.Rate, limits.KindRate, func() error {
			var text string
			if err := json.Unmarshal(p.Rate, &text); err != nil {
				return fmt.Errorf(`rate must be a string such as "10/s", "100/m", "1000/h" or "0", or null, not %.40s`, p.Rate)
			}
			rate, err := limits.ParseRate(text)
			if err != nil {
				return fmt.Errorf("rate %.40q: %w", text, err)
			}
			set.Rate = &rate
			return nil
		}),
		field(p.DailyQuota, limits.KindDailyQuota, func() error {
			n, err := integer(p.DailyQuota, "daily_quota", limits.MaxDailyQuota)
			if err == nil {
				set.DailyQuota = &n
			}
			return err
		}),
	)
	if err == nil {
		err = set.Validate()
	}
	if err == nil && !given {
		err = errors.New("nothing to change: give max_running, rate or daily_quota (null clears one)")
	}
	return set, unset, err
}

// patchTenantLimits is PATCH /v1/limits/{service}/tenant?id=TENANT: sets
// and clears the tenant's override, in one transaction, and answers its
// limits as they are now.
func (s *Server) patchTenantLimits(w http.ResponseWriter, r *http.Request) {
	svc, tenant, ok := s.tenantOf(w, r)
	if !ok {
		return
	}
	var req PatchLimitsRequest
	if !decodeBody(w, r, &req) {
		return
	}
	set, unset, err := req.parse()
	if err != nil {
		writeError(w, http.StatusBadRequest, "%s", strings.ReplaceAll(err.Error(), "\n", "; "))
		return
	}
	ctx := r.Context()
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if !set.IsZero() {
			if _, err := limits.SetOverride(ctx, tx, svc.Name(), tenant, set); err != nil {
				return err
			}
		}
		if len(unset) > 0 {
			_, err := limits.UnsetOverride(ctx, tx, svc.Name(), tenant, unset...)
			return err
		}
		return nil
	})
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	s.tenantLimits(w, r, svc, tenant, http.StatusOK)
}

// deleteTenantLimits is DELETE /v1/limits/{service}/tenant?id=TENANT:
// clears the tenant's whole override (204), or 404 when it has none.
func (s *Server) deleteTenantLimits(w http.ResponseWriter, r *http.Request) {
	svc, tenant, ok := s.tenantOf(w, r)
	if !ok {
		return
	}
	had, err := limits.UnsetOverride(r.Context(), s.pool, svc.Name(), tenant)
	if err != nil {
		s.writeErr(w, r, err)
		return
	}
	if !had {
		writeError(w, http.StatusNotFound, "tenant %q has no override of service %s's limits", tenant, svc.Name())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
