package sites

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/agent/artifact"
	"github.com/sandboxd/sandboxd/internal/secret"
)

// Archiver dumps a database to a stream and loads one.
type Archiver interface {
	Dump(ctx context.Context, db string, w io.Writer) error
	Load(ctx context.Context, db string, r io.Reader) error
}

// artifactLimits bound what an imported artifact may make: what a freeze
// may copy, and a database dump of up to 8 GiB.
var artifactLimits = artifact.Limits{Entries: TemplateLimits.Files + 8, Bytes: TemplateLimits.Bytes + 8<<30,
	Depth: TemplateLimits.Depth + 1, Record: 64 << 10, Database: 8 << 30}

func (m *Manager) archiver() (Archiver, error) {
	a, ok := m.cfg.DB.(Archiver)
	if !ok {
		return nil, errors.New("templates: the database server cannot dump databases")
	}
	return a, nil
}

// ExportTemplate streams a template this node holds as its artifact to
// w. The database is dumped to a file of the node's first (a tar entry
// needs its size).
func (m *Manager) ExportTemplate(ctx context.Context, id string, w io.Writer) error {
	t, err := m.Template(id)
	if err != nil {
		return err
	}
	if IsStock(id) {
		return fmt.Errorf("%w: template id %q is a stock template's", ErrInvalid, id)
	}
	ar, err := m.archiver()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(m.templateDir(id)), ".dump-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	// The database is the tenant's to grow: a dump past what an import
	// takes fails here, before it fills the node's disk.
	err = ar.Dump(ctx, t.DBName, &capped{w: f, left: artifactLimits.Database})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("export %s: %w", id, err)
	}
	if err := artifact.Write(w, t, f.Name(), filepath.Join(m.templateDir(id), "files")); err != nil {
		return fmt.Errorf("export %s: %w", id, err)
	}
	return nil
}

// ImportTemplate makes template id on this node from its artifact. A
// template the node holds is returned as it is, r unread. The artifact
// is extracted beside its final place and moved there only once its
// database is loaded: a failed import leaves nothing.
func (m *Manager) ImportTemplate(ctx context.Context, id string, r io.Reader) (*Template, error) {
	if IsStock(id) {
		return nil, fmt.Errorf("%w: template id %q is a stock template's", ErrInvalid, id)
	}
	if t, err := m.Template(id); err == nil {
		return t, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	ar, err := m.archiver()
	if err != nil {
		return nil, err
	}
	defer m.lock("template:" + id)()
	if t, err := m.Template(id); err == nil {
		return t, nil
	}
	dir := m.templateDir(id)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, err
	}
	tmp := dir + ".import"
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(tmp)
			_ = m.cfg.DB.DropSiteDatabase(context.WithoutCancel(ctx), templateDB(id), templateDB(id))
		}
	}()
	var t Template
	if err := artifact.Read(r, tmp, TemplateUID, artifactLimits, &t); err != nil {
		if errors.Is(err, artifact.ErrInvalid) {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		return nil, err
	}
	if t.ID != id || t.URL == "" {
		return nil, fmt.Errorf("%w: the artifact is of template %q, not %q", ErrInvalid, t.ID, id)
	}
	if err := m.cfg.DB.CreateSiteDatabase(ctx, "", templateDB(id), templateDB(id), secret.New("")); err != nil {
		return nil, err
	}
	sql, err := os.Open(filepath.Join(tmp, artifact.DatabaseName))
	if err != nil {
		return nil, err
	}
	err = ar.Load(ctx, templateDB(id), sql)
	sql.Close()
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", id, err)
	}
	if err := os.Remove(filepath.Join(tmp, artifact.DatabaseName)); err != nil {
		return nil, err
	}
	t.DBName = templateDB(id)
	if err := m.writeTemplate(tmp, &t); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, err
	}
	ok = true
	return &t, nil
}

// capped writes to w until left bytes are used, then fails.
type capped struct {
	w    io.Writer
	left int64
}

func (c *capped) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, fmt.Errorf("%w: the database dump is over %d GiB, more than a template holds", ErrInvalid, artifactLimits.Database>>30)
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}
