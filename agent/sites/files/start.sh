#!/bin/sh
# Starts one sandbox: puts WordPress core in place and installs it on the
# first start, then runs Apache in the foreground. Written by the agent;
# runs as www-data with no capabilities.
set -eu
cd /srv/site
# What this script and Apache say before its error log opens goes to the
# site's own logs/start.log (the container's stdout and stderr go nowhere):
# a plain file, kept under a MiB.
[ -f logs/start.log ] && [ ! -L logs/start.log ] || rm -rf -- logs/start.log
[ "$(stat -c %s logs/start.log 2>/dev/null || echo 0)" -lt 1048576 ] || : > logs/start.log
exec >>logs/start.log 2>&1
echo "sandbox: starting $(date -u +%FT%TZ)"
if [ ! -f state/core-copied ]; then
  # Debian's tree holds absolute symlinks (/etc/wordpress, /usr/share/javascript):
  # copy dereferenced so the site owns real files.
  cp -aL /usr/share/wordpress/. wordpress/ 2>/dev/null || true
  rm -f wordpress/wp-config.php wordpress/.htaccess
  [ -f wordpress/wp-settings.php ] || { echo "sandbox: WordPress core missing from the image" >&2; exit 1; }
  touch state/core-copied
fi
# The site may have made its log names links or directories; Apache would
# then fail to open them and the site stay down. They are the site's own,
# so they are simply made plain files again.
for f in logs/apache-error.log logs/php-error.log logs/access.log; do
  [ -f "$f" ] && [ ! -L "$f" ] || rm -rf -- "$f"
done
mkdir -p wordpress/wp-content/mu-plugins wordpress/wp-content/uploads tmp/opcache
cp conf/sandbox-mu-plugin.php wordpress/wp-content/mu-plugins/sandbox.php
if [ ! -f state/installed ]; then
  php -d display_errors=stderr conf/install.php
  touch state/installed
fi
exec apache2 -f /srv/site/conf/apache.conf -DFOREGROUND
