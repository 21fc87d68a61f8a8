package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
)

// Media types of a single-layer OCI image.
const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

func digestFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("digest %s: %w", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}

func digestBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// WriteOCIArchive wraps a root filesystem tarball as a single-layer OCI
// image archive (oci-layout, index.json, blobs) that containerd imports.
// The layer is left uncompressed: images are built and imported on the
// same machine, where gzip would only cost time.
func WriteOCIArchive(out io.Writer, rootfsTar, ref string, created time.Time) error {
	layerDigest, layerSize, err := digestFile(rootfsTar)
	if err != nil {
		return err
	}
	config, err := json.Marshal(map[string]any{
		"created":      created.UTC().Format(time.RFC3339),
		"architecture": "amd64",
		"os":           "linux",
		"config": map[string]any{
			"Env":        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"},
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        descriptor{MediaType: mediaConfig, Digest: digestBytes(config), Size: int64(len(config))},
		"layers":        []descriptor{{MediaType: mediaLayer, Digest: layerDigest, Size: layerSize}},
	})
	if err != nil {
		return err
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []descriptor{{MediaType: mediaManifest, Digest: digestBytes(manifest), Size: int64(len(manifest)),
			Annotations: map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref}}},
	})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(out)
	put := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: created}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	blob := func(d string) string { return "blobs/sha256/" + d[len("sha256:"):] }
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blob(digestBytes(manifest)), manifest},
		{blob(digestBytes(config)), config},
	} {
		if err := put(f.name, f.data); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	layer, err := os.Open(rootfsTar)
	if err != nil {
		return err
	}
	defer layer.Close()
	if err := tw.WriteHeader(&tar.Header{Name: blob(layerDigest), Mode: 0o644, Size: layerSize, ModTime: created}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, layer); err != nil {
		return fmt.Errorf("write layer: %w", err)
	}
	return tw.Close()
}
