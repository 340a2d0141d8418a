// Starts Swagger UI on /api/docs. A file of ours rather than an inline script: the
// Content-Security-Policy allows script from this origin only.
window.addEventListener('DOMContentLoaded', () => {
  const root = document.getElementById('swagger-ui');
  window.ui = window.SwaggerUIBundle({
    url: root.dataset.url,
    domNode: root,
    // The reference's own layout, without Swagger's top bar (the page has ClueCDC's).
    presets: [window.SwaggerUIBundle.presets.apis],
    layout: 'BaseLayout',
    deepLinking: true,
    // No request to validator.swagger.io or anywhere else: the page talks to this server only.
    validatorUrl: null,
    // A pasted token lives in this page only, not in localStorage.
    persistAuthorization: false,
    // "Try it out" is an API client: it authenticates with the token given to "Authorize" and
    // never with the browser's session cookie (which would make a missing token look like it
    // worked for reads and fail writes on CSRF). The document itself is loaded as usual.
    requestInterceptor: (req) => {
      if (!req.loadSpec) req.credentials = 'omit';
      return req;
    },
  });
});
