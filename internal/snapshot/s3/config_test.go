package s3_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"

	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/snapshot/s3"
	"substrate.dev/ate/internal/snapshot/storeurl"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want s3.Config // compared on the fields set here
		err  string    // substring of the error; "" = valid
	}{
		{url: "s3://b/p/q?endpoint=http://127.0.0.1:9000&region=eu-west-1",
			want: s3.Config{Bucket: "b", Prefix: "p/q", Endpoint: "127.0.0.1:9000", Region: "eu-west-1", Compression: "zstd"}},
		{url: "s3://b", want: s3.Config{Bucket: "b", Endpoint: "s3.amazonaws.com", Secure: true, Region: "us-east-1", Compression: "zstd"}},
		{url: "s3://b/p/?endpoint=https://s3.example:443&compression=none",
			want: s3.Config{Bucket: "b", Prefix: "p", Endpoint: "s3.example:443", Secure: true, Region: "us-east-1", Compression: "none"}},
		{url: "s3:///p", err: "no bucket"},
		{url: "http://b/p", err: "scheme must be s3"},
		{url: "s3://key:secret@b/p", err: "credentials do not belong"},
		{url: "s3://b/p?endpoint=127.0.0.1:9000", err: "endpoint must be"},
		{url: "s3://b/p?endpoint=ftp://h:1", err: "endpoint must be"},
		{url: "s3://b/p?compression=gzip", err: "compression"},
		{url: "s3://b/p?endpiont=http://h:1", err: `unknown parameter "endpiont"`},
		{url: "s3://b/a//c", err: "double slashes"},
		{url: "s3://b/p?region=a&region=b", err: "2 times"},
		{url: "s3://b/%zz", err: "bad S3"},
		// A secret put in the URL by mistake is refused and not repeated.
		{url: "s3://AKIAKEY:wJalrXUtnFEMIsecret@b/p?region=r", err: "credentials do not belong"},
		{url: "s3://b/p?secret_access_key=wJalrXUtnFEMIsecret", err: `unknown parameter "secret_access_key"`},
		{url: "s3://b/p?endpoint=http://AKIAKEY:wJalrXUtnFEMIsecret@h:9000", err: "endpoint must be"},
		{url: "s3://AKIAKEY:wJalrXUtnFEMI%zzsecret@b/p", err: "bad S3"},
		// A secret holding '/' ends the authority early: url.Parse's own
		// error would quote it as a port.
		{url: "s3://AKIAKEY:wJalrXUtnFEMI/K7MDENG@b/p", err: "bad S3"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			got, err := s3.ParseURL(tc.url)
			if tc.err != "" {
				if !errors.Is(err, s3.ErrBadURL) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseURL = %v, want ErrBadURL with %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "wJalrXUtnFEMI") {
					t.Fatalf("ParseURL's error repeats the secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w := tc.want
			if got.Bucket != w.Bucket || got.Prefix != w.Prefix || got.Endpoint != w.Endpoint || got.Secure != w.Secure ||
				got.Region != w.Region || got.Compression != w.Compression {
				t.Fatalf("ParseURL = %+v, want %+v", got, w)
			}
			if again, err := s3.ParseURL(got.URL()); err != nil || again.Endpoint != got.Endpoint || again.Prefix != got.Prefix {
				t.Fatalf("URL() %s does not parse back: %+v, %v", got.URL(), again, err)
			}
		})
	}
}

// TestNewRejectsBadSetups: New tells an unreachable endpoint, rejected
// credentials and a missing bucket apart, naming endpoint and bucket, and
// answers fast.
func TestNewRejectsBadSetups(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	// silent accepts connections and never answers: New must give up
	// after CheckTimeout rather than hang.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, tc := range []struct {
		name string
		edit func(*s3.Config)
		want error
		msg  string
	}{
		{"unreachable", func(c *s3.Config) { c.Endpoint = closed }, s3.ErrUnreachable, closed},
		{"silent", func(c *s3.Config) { c.Endpoint, c.CheckTimeout = silent.Addr().String(), time.Second },
			s3.ErrUnreachable, "no answer within 1s"},
		{"wrong secret", func(c *s3.Config) {
			c.Creds = credentials.NewStaticV4(srv.AccessKey, "not-the-secret", "")
		}, s3.ErrCredentials, "SignatureDoesNotMatch"},
		{"unknown key", func(c *s3.Config) { c.Creds = credentials.NewStaticV4("nobody", "x", "") }, s3.ErrCredentials, "InvalidAccessKeyId"},
		{"no credentials", func(c *s3.Config) { c.Creds = credentials.NewStatic("", "", "", credentials.SignatureAnonymous) },
			s3.ErrCredentials, "no credentials found"},
		{"missing bucket", func(c *s3.Config) { c.Bucket = "no-such-bucket" }, s3.ErrNoBucket,
			"bucket no-such-bucket does not exist at endpoint " + srv.Endpoint},
		{"no cache dir", func(c *s3.Config) { c.CacheDir = "" }, s3.ErrBadURL, "cache"},
		{"small parts", func(c *s3.Config) { c.PartSize = 1 << 20 }, s3.ErrBadURL, "5 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t, testPrefix(t))
			tc.edit(&cfg)
			start := time.Now()
			_, err := s3.New(context.Background(), cfg)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("New = %v, want %v naming %q", err, tc.want, tc.msg)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("New took %s to fail", d)
			}
			t.Log(err)
		})
	}
}

// TestCredentialChain: without Config.Creds, the AWS environment
// variables are used, then the shared credentials file.
func TestCredentialChain(t *testing.T) {
	ctx := context.Background()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	open := func() error {
		s, err := storeurl.Open(ctx, srv.URL(testPrefix(t)), storeurl.Options{CacheDir: t.TempDir()})
		if err == nil {
			_, err = s.List(ctx)
		}
		return err
	}
	if err := open(); !errors.Is(err, s3.ErrCredentials) {
		t.Fatalf("without credentials: %v, want ErrCredentials", err)
	}

	t.Run("environment", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
		if err := open(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("shared file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "credentials")
		ini := "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n[ate]\naws_access_key_id = " +
			srv.AccessKey + "\naws_secret_access_key = " + srv.SecretKey + "\n"
		if err := os.WriteFile(p, []byte(ini), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", p)
		t.Setenv("AWS_PROFILE", "ate")
		if err := open(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestStoreURL: a path or file:// URL is a Local store, s3:// the S3
// store, anything else ErrBadURL.
func TestStoreURL(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, u := range []string{filepath.Join(dir, "a"), "file://" + filepath.Join(dir, "b")} {
		s, err := storeurl.Open(ctx, u, storeurl.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := s.(*snapshot.Local); !ok {
			t.Fatalf("%s opened %T, want *snapshot.Local", u, s)
		}
	}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	s, err := storeurl.Open(ctx, srv.URL(testPrefix(t)), storeurl.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*s3.Store); !ok {
		t.Fatalf("s3 URL opened %T", s)
	}
	for _, u := range []string{"", "http://x/y", "file://host/p", "file:///p?x=1", "s3://"} {
		if _, err := storeurl.Open(ctx, u, storeurl.Options{CacheDir: dir}); !errors.Is(err, s3.ErrBadURL) {
			t.Errorf("Open(%q) = %v, want ErrBadURL", u, err)
		}
	}
}
