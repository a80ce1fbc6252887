package api

import (
	"encoding/json"
	"time"

	"github.com/tierq/tierq/service"
)

// SetNowFunc replaces the clock of s's readyz migration cache; call it
// before s serves.
func SetNowFunc(s *Server, now func() time.Time) { s.ready.nowFunc = now }

// HandSchema is the args schema of kind in OpenAPIFor's document had its
// args type's OpenAPISchema returned hand, or why there is none.
func HandSchema(kind service.Kind, hand json.RawMessage) (json.RawMessage, error) {
	return handSchema(kind, hand)
}
