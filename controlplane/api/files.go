package api

import (
	"encoding/base64"
	"net/http"

	"github.com/sandboxd/sandboxd/controlplane/access"
	"github.com/sandboxd/sandboxd/controlplane/rest"
	"github.com/sandboxd/sandboxd/controlplane/sitespec"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/sitepath"
)

// FileWrite is the JSON body of POST …/files/write.
type FileWrite struct {
	ContentBase64 *string `json:"contentBase64" doc:"The file's new content, standard base64. Required."`
}

// FileResult is what the sandbox's file manager answers to an operation.
type FileResult struct {
	OK        bool   `json:"ok"`
	Path      string `json:"path,omitempty" doc:"write, upload, mkdir, delete: the path acted on."`
	From      string `json:"from,omitempty" doc:"rename, copy: the source."`
	To        string `json:"to,omitempty" doc:"rename, copy: the destination."`
	SizeBytes *int64 `json:"sizeBytes,omitempty" doc:"write, upload: bytes written."`
}

// FileListing answers GET …/files.
type FileListing struct {
	Path    string               `json:"path"`
	Entries []sitespec.FileEntry `json:"entries"`
	// Truncated is set when the directory has more than 10,000 entries.
	Truncated bool `json:"truncated"`
}

// FileContent answers GET …/files/content.
type FileContent struct {
	Path          string `json:"path"`
	ContentBase64 string `json:"contentBase64"`
	SizeBytes     int64  `json:"sizeBytes"`
}

// maxFileBytes is the agent's limit on one file (sites.MaxFileBytes);
// maxFileBody adds base64 and multipart overhead to it.
const (
	maxFileBytes = 32 << 20
	maxFileBody  = maxFileBytes*4/3 + 1<<20
)

func decodeStdBase64(s string) ([]byte, error) { return base64.StdEncoding.Strict().DecodeString(s) }

var (
	fileParams = map[string]string{"id": "site", "op": "fileop"}
	fileErrs   = []string{apierr.CodeSiteNotFound, apierr.CodeInvalidRequest, sitespec.CodeFileNotFound, apierr.CodeConflict,
		apierr.CodePayloadTooLarge, apierr.CodePlanLimitReached}
	pathDoc = "Path relative to the WordPress root, base64url (RFC 4648 §5) without padding."
)

// fileRoutes are a site's file manager.
type fileRoutes struct {
	*base
	tools SiteTools
}

func (a fileRoutes) register(r *rest.Router) {
	g := guard{scope: scopeWorkspace, capability: access.Internals}
	a.bearer(r, g, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/files", Tag: "files", Params: siteParam,
		Query:   map[string]string{"path": pathDoc + " Omitted: the root."},
		Summary: "List a directory of the site's WordPress root.", Response: FileListing{}, Errors: fileErrs,
		Handler: a.listFiles})
	a.bearer(r, g, rest.Route{Method: "GET", Path: "/api/app/sites/{id}/files/content", Tag: "files", Params: siteParam,
		Query:   map[string]string{"path": pathDoc},
		Summary: "Read one file (up to 32 MiB).", Response: FileContent{}, Errors: fileErrs, Handler: a.readFile})
	a.bearer(r, g, rest.Route{Method: "POST", Path: "/api/app/sites/{id}/files/{op}", Tag: "files", Params: fileParams,
		Query: map[string]string{"path": pathDoc + " write, mkdir, delete, upload.", "from": pathDoc + " rename, copy.",
			"to": pathDoc + " rename, copy."},
		Summary: "File manager: op is write, mkdir, rename, copy, delete or upload. write and upload replace a file " +
			"(creating parent directories); an upload to an existing directory keeps the part's file name. " +
			"rename and copy refuse an existing destination. delete is recursive and irreversible. Paths never leave " +
			"the WordPress root: .., absolute paths, NUL, symlinks leading out, padded or standard base64 are refused.",
		Request: FileWrite{}, Multipart: map[string]string{"file": "file: upload: the file."},
		Response: FileResult{}, Errors: fileErrs, MaxBody: maxFileBody, Handler: a.fileOp})
}

// pathParams decodes the named query parameters; each is required.
func pathParams(req *http.Request, names ...string) (map[string]string, error) {
	out := map[string]string{}
	q := req.URL.Query()
	for _, n := range names {
		vals, ok := q[n]
		if !ok {
			return nil, apierr.Invalid(n, "query parameter %s is required", n)
		}
		if len(vals) != 1 {
			return nil, apierr.Invalid(n, "query parameter %s given %d times", n, len(vals))
		}
		p, err := sitepath.Decode(vals[0])
		if err != nil {
			return nil, apierr.Invalid(n, "%s: %v", n, err)
		}
		out[n] = p
	}
	return out, nil
}

func (a fileRoutes) listFiles(w http.ResponseWriter, req *http.Request) error {
	// Site first: a foreign or unknown site is 404 whatever the path.
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	p := ""
	if req.URL.Query().Has("path") {
		ps, err := pathParams(req, "path")
		if err != nil {
			return err
		}
		p = ps["path"]
	}
	out, err := a.tools.Files(req.Context(), s, sitespec.FileOp{Op: sitespec.FileList, Path: p})
	if err != nil {
		return err
	}
	view := FileListing{Path: out.Path, Entries: out.Entries, Truncated: out.Truncated}
	if view.Entries == nil {
		view.Entries = []sitespec.FileEntry{}
	}
	return rest.JSON(w, http.StatusOK, view)
}

func (a fileRoutes) readFile(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	ps, err := pathParams(req, "path")
	if err != nil {
		return err
	}
	out, err := a.tools.Files(req.Context(), s, sitespec.FileOp{Op: sitespec.FileRead, Path: ps["path"]})
	if err != nil {
		return err
	}
	size := int64(len(out.Content))
	if out.SizeBytes != nil {
		size = *out.SizeBytes
	}
	return rest.JSON(w, http.StatusOK, FileContent{Path: out.Path, ContentBase64: base64.StdEncoding.EncodeToString(out.Content),
		SizeBytes: size})
}

func (a fileRoutes) fileOp(w http.ResponseWriter, req *http.Request) error {
	s, err := a.siteIn(req)
	if err != nil {
		return err
	}
	op := sitespec.FileOp{Op: req.PathValue("op")}
	var names []string
	switch op.Op {
	case sitespec.FileWrite, sitespec.FileUpload, sitespec.FileMkdir, sitespec.FileDelete:
		names = []string{"path"}
	case sitespec.FileRename, sitespec.FileCopy:
		names = []string{"from", "to"}
	default:
		return apierr.Invalid("op", "op must be one of write, mkdir, rename, copy, delete, upload")
	}
	ps, err := pathParams(req, names...)
	if err != nil {
		return err
	}
	op.Path, op.From, op.To = ps["path"], ps["from"], ps["to"]
	if (op.Op == sitespec.FileDelete || op.Op == sitespec.FileMkdir || op.Op == sitespec.FileWrite) && op.Path == "" {
		return apierr.Invalid("path", "the WordPress root itself cannot be the target")
	}
	switch op.Op {
	case sitespec.FileWrite:
		var body FileWrite
		if err := rest.DecodeJSON(req, &body); err != nil {
			return err
		}
		if body.ContentBase64 == nil {
			return apierr.Invalid("contentBase64", "contentBase64 is required")
		}
		content, err := decodeStdBase64(*body.ContentBase64)
		if err != nil {
			return apierr.Invalid("contentBase64", "contentBase64 is not standard base64: %v", err)
		}
		op.Content = content
	case sitespec.FileUpload:
		f, err := rest.ReadForm(req, []string{"file"}, nil)
		if err != nil {
			return err
		}
		if f.FileField == "" {
			return apierr.Invalid("file", "the multipart body needs a file part named file")
		}
		op.Content, op.Filename = f.File, f.Filename
	}
	out, err := a.tools.Files(req.Context(), s, op)
	if err != nil {
		return err
	}
	return rest.JSON(w, http.StatusOK, FileResult{OK: true, Path: out.Path, From: out.From, To: out.To, SizeBytes: out.SizeBytes})
}
