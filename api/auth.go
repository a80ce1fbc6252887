package api

import (
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"net/http"
	"strings"
)

// auth lets a request through when its bearer token has at least role
// need: 401 without a token or with a wrong one, 403 for a producer token
// on an operator endpoint. Tokens are compared as SHA-256 digests in
// constant time, so neither their content nor their length leaks.
func (s *Server) auth(need role, next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := s.roleOf(r)
		switch {
		case got == roleNone:
			w.Header().Set("WWW-Authenticate", `Bearer realm="tierq"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
		case got < need:
			writeError(w, http.StatusForbidden, "this token may not use %s", r.Pattern) // "GET /v1/queues"
		default:
			next(w, r)
		}
	})
}

// roleOf is the role of r's bearer token.
func (s *Server) roleOf(r *http.Request) role {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return roleNone
	}
	return s.tokenRole(token)
}

// tokenRole is the role token grants (roleNone for "" and for a wrong one).
func (s *Server) tokenRole(token string) role {
	if token == "" {
		return roleNone
	}
	digest := sha256.Sum256([]byte(token))
	isAdmin := subtle.ConstantTimeCompare(digest[:], s.adminDigest[:])
	isProducer := subtle.ConstantTimeCompare(digest[:], s.producerDigest[:])
	switch {
	case isAdmin == 1:
		return roleAdmin
	case isProducer == 1:
		return roleProducer
	}
	return roleNone
}
