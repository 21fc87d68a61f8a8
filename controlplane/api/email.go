package api

import (
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/internal/apierr"
	agentv1 "github.com/sandboxd/sandboxd/protocol/agent/v1"
)

// EmailView is one message a site sent; it was captured, not delivered.
type EmailView struct {
	ID      string    `json:"id"`
	From    string    `json:"from"`
	To      string    `json:"to" doc:"Recipients, comma-separated."`
	Subject string    `json:"subject"`
	Date    time.Time `json:"date"`
	Text    string    `json:"text"`
	HTML    string    `json:"html"`
}

type emailsResponse struct {
	Emails []EmailView `json:"emails"`
}

func (a *API) registerEmail(r *rest.Router) {
	g := guard{scope: scopeWorkspace}
	errs := []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest}
	a.bearer(r, g, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/email", Tag: "sites", Params: siteParam,
		Summary:  "Mail the site sent (PHP mail(), wp_mail), captured and never delivered; newest first.",
		Response: emailsResponse{}, Errors: errs, Handler: a.listEmails})
	a.bearer(r, g, rest.Route{Method: "DELETE", Path: "/api/app/sites/{id}/email", Tag: "sites", Params: siteParam,
		Summary: "Clear the captured mail.", Response: okResponse{}, Errors: errs, Handler: a.clearEmails})
}

func (a *API) listEmails(w http.ResponseWriter, req *http.Request) error {
	s, agent, err := a.readyAgent(req)
	if err != nil {
		return err
	}
	resp, err := agent.ListEmails(req.Context(), connect.NewRequest(&agentv1.SiteRef{SiteId: s.ID}))
	if err != nil {
		return agentError(err)
	}
	out := make([]EmailView, 0, len(resp.Msg.Emails))
	for _, e := range resp.Msg.Emails {
		out = append(out, EmailView{ID: e.Id, From: e.From, To: strings.Join(e.To, ", "), Subject: e.Subject,
			Date: time.Unix(e.DateUnix, 0).UTC(), Text: e.Text, HTML: e.Html})
	}
	return rest.JSON(w, http.StatusOK, emailsResponse{Emails: out})
}

func (a *API) clearEmails(w http.ResponseWriter, req *http.Request) error {
	s, agent, err := a.readyAgent(req)
	if err != nil {
		return err
	}
	if _, err := agent.ClearEmails(req.Context(), connect.NewRequest(&agentv1.SiteRef{SiteId: s.ID})); err != nil {
		return agentError(err)
	}
	return rest.JSON(w, http.StatusOK, okResponse{OK: true})
}
