package api

import (
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

type emailsResponse struct {
	Emails []sitespec.Email `json:"emails"`
}

// emailRoutes are a site's captured outgoing mail.
type emailRoutes struct {
	*base
	tools SiteTools
}

func (a emailRoutes) register(r *rest.Router) {
	g := guard{scope: scopeWorkspace}
	errs := []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest}
	a.bearer(r, g, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/email", Tag: "sites", Params: siteParam,
		Summary:  "Mail the site sent (PHP mail(), wp_mail), captured and never delivered; newest first.",
		Response: emailsResponse{}, Errors: errs, Handler: a.listEmails})
	a.bearer(r, g, rest.Route{Method: "DELETE", Path: "/api/app/sites/{id}/email", Tag: "sites", Params: siteParam,
		Summary: "Clear the captured mail.", Response: okResponse{}, Errors: errs, Handler: a.clearEmails})
}

func (a emailRoutes) listEmails(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	out, err := a.tools.Emails(req.Context(), s)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, emailsResponse{Emails: out})
}

func (a emailRoutes) clearEmails(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	if err := a.tools.ClearEmails(req.Context(), s); err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, okResponse{OK: true})
}
