package api

// The console's subscriptions page: look a user's tier up, set it, and
// list the subscriptions by user id, through package subscriptions with
// tierctl subscriptions set's checks (subscriptions.CheckUserID,
// tiers.Parse). The table keeps no actor: the console's log line of the
// action ("console action", action "set tier") names the operator.

import (
	"log/slog"
	"net/http"
	"net/url"

	"github.com/tierq/tierq/subscriptions"
	"github.com/tierq/tierq/tiers"
)

// consoleSubscriptionsPage is the list's page size.
const consoleSubscriptionsPage = 50

// subscriptionsData is the subscriptions page.
type subscriptionsData struct {
	// User is the user looked up ("": none); Looked says it was (a user
	// id), Found whether it has a subscription, Sub is it.
	User   string
	Looked bool
	Found  bool
	Sub    subscriptions.Subscription
	// Tier refills the form after a refused set.
	Tier  string
	Tiers []string
	// Rows are a page of subscriptions after After; Next is the next
	// page's URL.
	Rows  []subscriptions.Subscription
	After string
	Next  string
}

func newSubscriptionsData() subscriptionsData {
	d := subscriptionsData{}
	for _, t := range tiers.All() {
		d.Tiers = append(d.Tiers, t.String())
	}
	return d
}

func (s *Server) consoleSubscriptions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	data := newSubscriptionsData()
	data.User, data.After = q.Get("user"), q.Get("after")
	s.showSubscriptions(w, r, http.StatusOK, "", data)
}

// showSubscriptions renders the page for data.User and data.After with
// status and errMsg above it.
func (s *Server) showSubscriptions(w http.ResponseWriter, r *http.Request, status int, errMsg string, data subscriptionsData) {
	ctx := r.Context()
	page := consolePage{Title: "Subscriptions", Nav: "subscriptions", Error: errMsg, Data: &data}
	valid := false
	if data.User != "" {
		err := subscriptions.CheckUserID(data.User)
		if valid = err == nil; !valid && page.Error == "" {
			page.Error, status = err.Error()+".", http.StatusBadRequest
		}
	}
	if valid {
		sub, ok, err := subscriptions.Get(ctx, s.pool, data.User)
		if err != nil {
			s.consoleInternal(w, r, err)
			return
		}
		data.Looked, data.Found, data.Sub = true, ok, sub
		if data.Tier == "" {
			data.Tier = tiers.Free.String()
			if ok {
				data.Tier = sub.Tier.String()
			}
		}
	}
	if len(data.After) > subscriptions.MaxUserIDLen {
		page.Error, status, data.After = "The page cursor (after) is longer than a user id.", http.StatusBadRequest, ""
	}
	rows, err := subscriptions.List(ctx, s.pool, data.After, consoleSubscriptionsPage)
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	data.Rows = rows
	if len(rows) == consoleSubscriptionsPage {
		data.Next = ConsolePrefix + "/subscriptions?" + url.Values{"after": {rows[len(rows)-1].UserID}}.Encode()
	}
	s.render(w, r, status, "subscriptions", page)
}

func (s *Server) consoleSetTier(w http.ResponseWriter, r *http.Request) {
	data := newSubscriptionsData()
	data.User, data.Tier = r.PostFormValue("user"), r.PostFormValue("tier")
	if err := subscriptions.CheckUserID(data.User); err != nil {
		s.showSubscriptions(w, r, http.StatusBadRequest, "Not set: "+err.Error()+".", data)
		return
	}
	tier, err := tiers.Parse(data.Tier)
	if err != nil {
		s.showSubscriptions(w, r, http.StatusBadRequest, "Not set: "+err.Error()+".", data)
		return
	}
	ctx := r.Context()
	before, had, err := subscriptions.Get(ctx, s.pool, data.User)
	if err == nil {
		err = subscriptions.Set(ctx, s.pool, data.User, tier)
	}
	from := tiers.Free.String()
	if had {
		from = before.Tier.String()
	}
	s.logAction(r, "set tier", err, slog.String("user_id", data.User), slog.String("from_tier", from), slog.String("tier", tier.String()))
	if err != nil {
		s.consoleInternal(w, r, err)
		return
	}
	http.Redirect(w, r, ConsolePrefix+"/subscriptions?"+url.Values{"user": {data.User}}.Encode(), http.StatusSeeOther)
}
