package api

import (
	"context"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/state"
	"github.com/sandboxd/sandboxd/internal/apierr"
)

// Webhooks is what the webhook routes need from the webhooks service.
type Webhooks interface {
	Get(ws *state.Workspace) (*state.Webhook, *state.Delivery, error)
	Put(ctx context.Context, ws *state.Workspace, url string, sendEvents bool) (*state.Webhook, string, error)
	Rotate(ctx context.Context, ws *state.Workspace) (*state.Webhook, string, error)
	Delete(ctx context.Context, ws *state.Workspace) error
	Test(ctx context.Context, ws *state.Workspace) (*state.Delivery, error)
}

// WebhookView is a workspace's demo-launch webhook; never its secret.
type WebhookView struct {
	URL          string        `json:"url"`
	SendEvents   bool          `json:"sendEvents"`
	CreatedAt    time.Time     `json:"createdAt"`
	UpdatedAt    time.Time     `json:"updatedAt"`
	LastDelivery *DeliveryView `json:"lastDelivery" doc:"The most recent delivery attempt's result; null before the first."`
}

// DeliveryView is one delivery's latest attempt.
type DeliveryView struct {
	ID         string    `json:"id" doc:"The delivery's id: its x-service-delivery header."`
	Event      string    `json:"event" enum:"@webhookEvent"`
	Attempt    int       `json:"attempt" doc:"1..8"`
	Status     string    `json:"status" enum:"@deliveryStatus"`
	HTTPStatus *int      `json:"httpStatus" doc:"The receiver's answer; null when it gave none (refused, timed out)."`
	Error      *string   `json:"error"`
	At         time.Time `json:"at"`
}

func deliveryView(d *state.Delivery) *DeliveryView {
	if d == nil || d.At == nil {
		return nil
	}
	v := &DeliveryView{ID: d.ID, Event: d.Event, Attempt: d.Attempt, Status: d.Status, Error: optional(d.Error), At: *d.At}
	if d.HTTPStatus != 0 {
		code := d.HTTPStatus
		v.HTTPStatus = &code
	}
	return v
}

func webhookView(w *state.Webhook, last *state.Delivery) *WebhookView {
	if w == nil {
		return nil
	}
	return &WebhookView{URL: w.URL, SendEvents: w.SendEvents, CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt, LastDelivery: deliveryView(last)}
}

// PutWebhookRequest is the body of PUT /api/account/webhooks/demo-launches.
type PutWebhookRequest struct {
	URL        string `json:"url" doc:"https URL (at most 2048 characters). Plain http only for hosts on the operator's --fetch-allow list."`
	SendEvents *bool  `json:"sendEvents,omitempty" doc:"Default true; false pauses delivery and keeps the URL."`
}

type webhookResponse struct {
	Webhook *WebhookView `json:"webhook" doc:"null when none is set."`
}

type webhookSecretResponse struct {
	Webhook       *WebhookView `json:"webhook"`
	SigningSecret *string      `json:"signingSecret,omitempty" doc:"Only when the webhook is first set or its secret rotated: keep it, it is not shown again."`
}

type deliveryResponse struct {
	Delivery *DeliveryView `json:"delivery"`
}

// webhookRoutes are the workspace's demo-launch webhook.
type webhookRoutes struct {
	*base
	webhooks Webhooks
}

func (a webhookRoutes) register(r *rest.Router) {
	g := guard{scope: scopeWorkspace, capability: access.Integrations}
	const path = "/api/account/webhooks/demo-launches"
	paid := []string{apierr.CodeTemplateSharingRequiresPaidPlan}
	a.bearer(r, g, rest.Route{Method: "GET", Path: path, Tag: "webhooks",
		Summary: "The selected workspace's demo-launch webhook, with its most recent delivery.", Response: webhookResponse{},
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			hook, last, err := a.webhooks.Get(CallerFrom(req.Context()).Workspace)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, webhookResponse{Webhook: webhookView(hook, last)})
		}})
	a.bearer(r, g, rest.Route{Method: "PUT", Path: path, Tag: "webhooks",
		Summary: "Set where demo.ready and demo.expired events go (paid plan). The signing secret is returned when the webhook is first set.",
		Request: PutWebhookRequest{}, Response: webhookSecretResponse{}, Errors: append([]string{apierr.CodeInvalidRequest}, paid...),
		Handler: a.putWebhook})
	a.bearer(r, g, rest.Route{Method: "DELETE", Path: path, Tag: "webhooks",
		Summary:  "Remove the webhook, its signing secret and its delivery history, pending deliveries included.",
		Response: deletedResponse{}, Handler: func(w http.ResponseWriter, req *http.Request) error {
			if err := a.webhooks.Delete(req.Context(), CallerFrom(req.Context()).Workspace); err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, deletedResponse{Deleted: true})
		}})
	a.bearer(r, g, rest.Route{Method: "POST", Path: path + "/test", Tag: "webhooks",
		Summary:  "Send a test event (a demo.ready with source test) now, whether or not sendEvents is on; answers its result.",
		Response: deliveryResponse{}, Errors: append([]string{apierr.CodeInvalidRequest}, paid...),
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			d, err := a.webhooks.Test(req.Context(), CallerFrom(req.Context()).Workspace)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, deliveryResponse{Delivery: deliveryView(d)})
		}})
	a.bearer(r, g, rest.Route{Method: "POST", Path: path + "/rotate-secret", Tag: "webhooks",
		Summary:  "Replace the signing secret; every delivery from now on, retries included, is signed with the new one.",
		Response: webhookSecretResponse{}, Errors: append([]string{apierr.CodeInvalidRequest}, paid...),
		Handler: func(w http.ResponseWriter, req *http.Request) error {
			ws := CallerFrom(req.Context()).Workspace
			hook, secret, err := a.webhooks.Rotate(req.Context(), ws)
			if err != nil {
				return err
			}
			return rest.JSON(w, http.StatusOK, webhookSecretResponse{Webhook: webhookView(hook, a.lastDelivery(ws)), SigningSecret: &secret})
		}})
}

func (a webhookRoutes) lastDelivery(ws *state.Workspace) *state.Delivery {
	_, last, _ := a.webhooks.Get(ws)
	return last
}

func (a webhookRoutes) putWebhook(w http.ResponseWriter, req *http.Request) error {
	ws := CallerFrom(req.Context()).Workspace
	var body PutWebhookRequest
	if err := rest.DecodeJSON(req, &body); err != nil {
		return err
	}
	send := true
	if body.SendEvents != nil {
		send = *body.SendEvents
	}
	hook, secret, err := a.webhooks.Put(req.Context(), ws, body.URL, send)
	if err != nil {
		return err
	}
	resp := webhookSecretResponse{Webhook: webhookView(hook, a.lastDelivery(ws))}
	if secret != "" {
		resp.SigningSecret = &secret
	}
	return rest.JSON(w, http.StatusOK, resp)
}
