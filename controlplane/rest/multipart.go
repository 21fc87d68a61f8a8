package rest

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/internal/apierr"
)

// Form is a parsed multipart/form-data body: at most one file part and
// small text fields.
type Form struct {
	// Field holds the text fields by name.
	Field map[string]string
	// File is the content of the file part, FileField its name, Filename
	// the name the client gave it.
	File      []byte
	FileField string
	Filename  string
}

// IsMultipart reports whether a request carries a multipart/form-data body.
func IsMultipart(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "multipart/form-data"
}

// maxField bounds one text field of a form.
const maxField = 64 << 10

// ReadForm reads a multipart/form-data body with one file part among
// fileFields and text fields among textFields; anything else is refused
// with details.field, as unknown JSON fields are. The route's MaxBody
// bounds the whole body.
func ReadForm(r *http.Request, fileFields, textFields []string) (*Form, error) {
	if !IsMultipart(r) {
		return nil, apierr.Invalid("", "Content-Type must be multipart/form-data").With("contentType", r.Header.Get("Content-Type"))
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, apierr.Invalid("", "bad multipart body: %v", err)
	}
	f := &Form{Field: map[string]string{}}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ae := tooLarge(err); ae != nil {
				return nil, ae
			}
			return nil, apierr.Invalid("", "bad multipart body: %v", err)
		}
		name := part.FormName()
		switch {
		case slices.Contains(fileFields, name):
			if f.FileField != "" {
				return nil, apierr.Invalid(name, "only one file may be sent")
			}
			var buf bytes.Buffer
			if _, err := io.Copy(&buf, part); err != nil {
				if ae := tooLarge(err); ae != nil {
					return nil, ae
				}
				return nil, apierr.Invalid(name, "reading the file: %v", err)
			}
			f.File, f.FileField, f.Filename = buf.Bytes(), name, part.FileName()
		case slices.Contains(textFields, name):
			b, err := io.ReadAll(io.LimitReader(part, maxField+1))
			if err != nil {
				if ae := tooLarge(err); ae != nil {
					return nil, ae
				}
				return nil, apierr.Invalid(name, "reading the field: %v", err)
			}
			if len(b) > maxField {
				return nil, apierr.Invalid(name, "field is over %d bytes", maxField)
			}
			f.Field[name] = string(b)
		default:
			return nil, apierr.Invalid(name, "unknown form field %q; expected %s", name,
				strings.Join(append(append([]string{}, fileFields...), textFields...), ", "))
		}
	}
	return f, nil
}

// FormBool reads a boolean text field ("true"/"false"/"1"/"0"; absent = false).
func (f *Form) FormBool(name string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(f.Field[name])) {
	case "", "false", "0":
		return false, nil
	case "true", "1":
		return true, nil
	}
	return false, apierr.Invalid(name, "%s must be true or false", name)
}
