package sites

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Rename moves a running clone to another slug and URL and, when it is a
// clone of the stock install, gives it name as its title and adminEmail
// as its administrator's: how a pooled site is claimed. The container
// keeps running (WordPress reads its configuration and options on every
// request), so the claimed site answers at its new URL at once. A retry
// converges: the database is moved from whatever URL it still holds.
func (m *Manager) Rename(ctx context.Context, id, slug, url, name, adminEmail string, sleepAfterSeconds int64) (*Site, error) {
	r := CreateRequest{ID: id, Slug: slug, Name: name, PHPVersion: "-", URL: url, AdminUser: "admin", AdminEmail: orDefault(adminEmail, "admin@example.com")}
	if err := validate(&r); err != nil {
		return nil, err
	}
	cl, ok := m.cfg.DB.(Cloner)
	if !ok {
		return nil, errors.New("templates: the database server cannot copy databases")
	}
	defer m.Lock(id)()
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	if s.Template == "" {
		return nil, fmt.Errorf("%w: site %s is not a clone; only clones are renamed", ErrInvalid, id)
	}
	if err := m.moveDB(ctx, cl, s, url); err != nil {
		return nil, err
	}
	s.Slug, s.URL, s.Name = slug, url, name
	s.Pooled, s.Limits.SleepAfterSeconds = false, sleepAfterSeconds
	if adminEmail != "" {
		s.AdminEmail = adminEmail
	}
	if s.Stock {
		if err := m.setIdentity(ctx, s); err != nil {
			return nil, err
		}
	}
	if err := m.rewriteConfig(s); err != nil {
		return nil, err
	}
	if err := m.save(s); err != nil {
		return nil, err
	}
	return s, nil
}

// SetURL moves a running site's WordPress to url: every URL in its
// database (serialized values kept intact) and its wp-config.php's home
// and site URL. Its slug, files and container stay; WordPress answers at
// the new URL with the next request. How a custom domain is switched on
// and off; a retry converges from whatever URL the database still holds.
func (m *Manager) SetURL(ctx context.Context, id, url string) (*Site, error) {
	s := m.get(id)
	if s == nil {
		return nil, ErrNotFound
	}
	r := CreateRequest{ID: id, Slug: s.Slug, Name: s.Name, PHPVersion: "-", URL: url, AdminUser: "admin", AdminEmail: orDefault(s.AdminEmail, "admin@example.com")}
	if err := validate(&r); err != nil {
		return nil, err
	}
	cl, ok := m.cfg.DB.(Cloner)
	if !ok {
		return nil, errors.New("sites: the database server cannot rewrite URLs")
	}
	defer m.Lock(id)()
	if s = m.get(id); s == nil {
		return nil, ErrNotFound
	}
	if err := m.moveDB(ctx, cl, s, url); err != nil {
		return nil, err
	}
	s.URL = url
	if err := m.rewriteConfig(s); err != nil {
		return nil, err
	}
	if err := m.save(s); err != nil {
		return nil, err
	}
	return s, nil
}

// moveDB moves every URL in the site's database from its current URL to
// url (nothing when they are the same).
func (m *Manager) moveDB(ctx context.Context, cl Cloner, s *Site, url string) error {
	if s.URL == url {
		return nil
	}
	rw, err := rewriter(s.URL, url)
	if err != nil {
		return err
	}
	_, err = cl.RewriteURLs(ctx, s.DBName, rw)
	return m.dbError(s.ID, err)
}

// rewriteConfig writes the site's wp-config.php and hosts file for its
// current record. Both are bind-mounted one by one into the running
// container, which holds their inodes: they are rewritten in place.
func (m *Manager) rewriteConfig(s *Site) error {
	config, hosts, err := renderConfig(s)
	if err != nil {
		return err
	}
	fs := m.FS(s.ID)
	for _, f := range []struct {
		path string
		data []byte
	}{{filepath.Join(fs, "secrets", "wp-config.php"), config}, {filepath.Join(fs, "conf", "hosts"), hosts}} {
		if err := rewriteInPlace(f.path, f.data); err != nil {
			return err
		}
	}
	return nil
}

// rewriteInPlace replaces a root-owned file's content, keeping its inode.
func rewriteInPlace(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
