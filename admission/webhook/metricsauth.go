package webhook

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// reviewBackoff retries TokenReviews and SubjectAccessReviews that failed
// to reach the API server (k8s.io/apiserver's default for delegated
// authentication and authorization).
var reviewBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// withDelegatedAuth serves handler only to requests whose bearer token the
// API server authenticates (a TokenReview; no or a bad token: 401) and
// whose user may use the HTTP method on the path as a non-resource URL (a
// SubjectAccessReview; denied: 403), as kube-apiserver's own endpoints do.
// Results are cached briefly (a minute for tokens, five minutes for
// allowed and 30 s for denied reviews).
func withDelegatedAuth(client kubernetes.Interface, logger klog.Logger, handler http.Handler) (http.Handler, error) {
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 time.Minute,
		TokenAccessReviewClient:  client.AuthenticationV1(),
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      &reviewBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegated authentication: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: client.AuthorizationV1(),
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       &reviewBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegated authorization: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		res, ok, err := authn.AuthenticateRequest(req)
		if err != nil || !ok {
			// A rejected token is an error of the token authenticator: like
			// kube-apiserver, answer 401 either way.
			logger.V(4).Info("Unauthenticated metrics request", "remote", req.RemoteAddr, "err", err)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{User: res.User, Verb: strings.ToLower(req.Method), Path: req.URL.Path}
		decision, reason, err := authz.Authorize(req.Context(), attrs)
		if err != nil {
			logger.Error(err, "Authorizing a metrics request", "user", res.User.GetName())
			http.Error(w, "authorization failed", http.StatusInternalServerError)
			return
		}
		if decision != authorizer.DecisionAllow {
			logger.V(4).Info("Forbidden metrics request", "user", res.User.GetName(), "reason", reason)
			http.Error(w, fmt.Sprintf("user %q may not get %s", res.User.GetName(), req.URL.Path), http.StatusForbidden)
			return
		}
		handler.ServeHTTP(w, req)
	}), nil
}
