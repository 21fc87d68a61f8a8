package rest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/sandboxd/sandboxd/internal/apierr"
)

// DecodeJSON reads a JSON object body into v strictly: the Content-Type
// must be application/json, unknown fields and trailing data are refused,
// and an oversized body is payload_too_large. Every failure is an
// *apierr.Error whose details.field names the offending field when known.
func DecodeJSON(r *http.Request, v any) error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || mt != "application/json" {
		return apierr.Invalid("", "Content-Type must be application/json").With("contentType", ct)
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		if err != nil {
			if ae := tooLarge(err); ae != nil {
				return ae
			}
		}
		return apierr.Invalid("", "request body must be a single JSON object")
	}
	return nil
}

func tooLarge(err error) *apierr.Error {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return apierr.New(http.StatusRequestEntityTooLarge, apierr.CodePayloadTooLarge,
			"request body exceeds %d bytes", mb.Limit).With("limitBytes", mb.Limit)
	}
	return nil
}

func decodeError(err error) error {
	if ae := tooLarge(err); ae != nil {
		return ae
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return apierr.Invalid("", "request body is empty; a JSON object is required")
	case errors.As(err, &syn):
		return apierr.Invalid("", "malformed JSON at byte %d", syn.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return apierr.Invalid("", "malformed JSON: unexpected end of body")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return apierr.Invalid("", "request body must be a JSON object")
		}
		return apierr.Invalid(field, "field %q must be %s", field, jsonKind(typ.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return apierr.Invalid(field, "unknown field %q", field)
	}
	return apierr.Invalid("", "invalid JSON body: %s", err.Error())
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int64", "int32", "uint", "uint64", "float64":
		return "a number"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "ptr":
		return "a value of the documented type"
	}
	return fmt.Sprintf("of type %s", goKind)
}

// JSON writes a success response. It returns nil so a handler can end
// with `return rest.JSON(...)`; once the status is sent, a failed write
// means the client went away and there is nothing left to tell it.
func JSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
	return nil
}

// ReadBody reads the whole (already size-capped) body; an oversized one
// is payload_too_large.
func ReadBody(r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		if ae := tooLarge(err); ae != nil {
			return nil, ae
		}
		return nil, apierr.Invalid("", "the request body could not be read: %v", err)
	}
	return data, nil
}

// RawJSON writes an already encoded JSON answer, as JSON would have.
func RawJSON(w http.ResponseWriter, status int, body []byte) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return nil
}
