package launcher

import "html/template"

// The pages are html/template: every value is escaped for where it lands
// (text, attribute, URL). None has an inline script or style.
const head = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex">
<title>{{.Title}}</title>
<link rel="stylesheet" href="/launch-assets/launcher.css">`

var pageTmpl = template.Must(template.New("page").Parse(head + `
<link rel="stylesheet" href="/launch/{{.Token}}/theme.css">
</head><body class="launcher">
<main class="card">
{{- if .Branding.LogoURL}}<img class="logo" src="{{.Branding.LogoURL}}" alt="{{.Branding.BrandName}}">{{end}}
{{- if .Branding.BrandName}}<p class="brand" id="brand">{{.Branding.BrandName}}</p>{{end}}
{{- if .Branding.Eyebrow}}<p class="eyebrow" id="eyebrow">{{.Branding.Eyebrow}}</p>{{end}}
<h1 id="headline">{{.Branding.Headline}}</h1>
{{- if .Branding.Subhead}}<p class="subhead" id="subhead">{{.Branding.Subhead}}</p>{{end}}
{{- if .Returning}}<p class="note" id="returning">Your demo is still running{{if .Until}} until {{.Until}}{{end}}.</p>{{end}}
{{- if .Error}}<p class="error" id="error" role="alert">{{.Error}}</p>{{end}}
<form method="post" action="/launch/{{.Token}}" id="launch">
{{- if .Email}}
<label for="email">Email</label>
<input id="email" name="email" type="email" required maxlength="254" autocomplete="email" value="{{.EmailValue}}">
{{- if .Consent}}
<label class="consent"><input type="checkbox" id="consent" name="consent" value="yes"{{if .ConsentChecked}} checked{{end}}> <span id="consent-label">{{.ConsentLabel}}</span></label>
{{- end}}
{{- end}}
<button type="submit" id="submit">{{.ButtonLabel}}</button>
</form>
{{- if not .Branding.HidePoweredBy}}<p class="powered" id="powered">Powered by {{.PoweredBy}}</p>{{end}}
</main>
</body></html>
`))

var progressTmpl = template.Must(template.New("progress").Parse(head + `
<link rel="stylesheet" href="/launch/{{.Token}}/theme.css">
<noscript><meta http-equiv="refresh" content="1"></noscript>
<script src="/launch-assets/launcher.js" defer></script>
</head><body class="launcher" data-status="{{.Status}}">
<main class="card">
<h1>Preparing your demo…</h1>
<p class="subhead">It is being made for you; you will be signed in as soon as it is ready.</p>
<progress id="progress" max="100" value="{{.Progress}}"></progress>
<p id="percent">{{.Progress}}%</p>
{{- if not .HidePoweredBy}}<p class="powered">Powered by {{.PoweredBy}}</p>{{end}}
</main>
</body></html>
`))

var messageTmpl = template.Must(template.New("message").Parse(head + `
</head><body class="launcher">
<main class="card">
<h1>{{.Title}}</h1>
<p class="subhead">{{.Text}}</p>
{{- if .Token}}<p><a href="/launch/{{.Token}}">Back to the launch page</a></p>{{end}}
</main>
</body></html>
`))
