package api

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/tierq/tierq/dlq"
	"github.com/tierq/tierq/escalation"
	"github.com/tierq/tierq/limits"
)

// errorBody is every error's JSON.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, errorBody{Error: fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"error":"encode response"}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// writeErr answers err with the status its sentinel means (400 invalid,
// 404 not found, 409 conflicting with the current state) and its message;
// anything else is an internal error.
func (s *Server) writeErr(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, dlq.ErrInvalid), errors.Is(err, escalation.ErrInvalid), errors.Is(err, limits.ErrInvalid):
		writeError(w, http.StatusBadRequest, "%v", err)
	case errors.Is(err, dlq.ErrNotFound), errors.Is(err, escalation.ErrNotFound), errors.Is(err, errJobNotFound):
		writeError(w, http.StatusNotFound, "%v", err)
	case errors.Is(err, dlq.ErrAlreadyReplayed), errors.Is(err, dlq.ErrDuplicate), errors.Is(err, escalation.ErrNotQueued),
		errors.Is(err, escalation.ErrNotServiceQueue):
		writeError(w, http.StatusConflict, "%v", err)
	default:
		s.internalError(w, r, err)
	}
}

// writeQuotaError answers a job its tenant's daily quota refused: 429,
// Retry-After the seconds until the quota resets (the next midnight UTC,
// from the inserting transaction's clock; at least 1), and the error's
// message, which names the tenant, the quota and when it resets.
func writeQuotaError(w http.ResponseWriter, quota *limits.QuotaError) {
	w.Header().Set("Retry-After", strconv.FormatInt(int64(quota.RetryAfter.Seconds()), 10))
	writeError(w, http.StatusTooManyRequests, "%v", quota)
}

// internalError logs err and answers 500 without its details (they may name
// tables, hosts or values), or 503 when the database is unreachable.
func (s *Server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	s.logger.ErrorContext(r.Context(), "request failed", slog.String("method", r.Method),
		slog.String("pattern", r.Pattern), slog.String("error", err.Error()))
	if isUnavailable(err) {
		writeError(w, http.StatusServiceUnavailable, "database unavailable; retry later")
		return
	}
	writeError(w, http.StatusInternalServerError, "internal error")
}
