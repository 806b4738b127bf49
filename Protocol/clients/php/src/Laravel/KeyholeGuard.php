<?php

declare(strict_types=1);

namespace Keyhole\Laravel;

use Illuminate\Auth\GuardHelpers;
use Illuminate\Contracts\Auth\Guard;
use Illuminate\Http\Request;
use Keyhole\Http\Authentication;
use Keyhole\Http\Authenticator;
use Symfony\Component\HttpKernel\Exception\HttpException;

/**
 * Laravel guard (driver "keyhole", registered by KeyholeServiceProvider): the request's session
 * from `Authorization: Bearer kh_...`, else the cookie, asked of keyholed once per request.
 *
 * user() is a KeyholeUser, or null when anonymous (no credential, or session_not_found). When
 * keyholed cannot say (unreachable, past the deadline, any other error) user() throws an
 * HttpException 503: fail closed, never signed in.
 */
final class KeyholeGuard implements Guard
{
    use GuardHelpers;

    private ?Authentication $authentication = null;

    public function __construct(private readonly Authenticator $authenticator, private Request $request)
    {
    }

    /** The request's authentication (asked of keyholed on first use), without throwing. */
    public function authentication(): Authentication
    {
        // The Cookie header itself (Authenticator::cookie()), not $request->cookies, which is
        // PHP's $_COOKIE; those only for a request without a Cookie header.
        return $this->authentication ??= $this->authenticator->authenticateRequest(
            $this->request->headers->get('Authorization'),
            array_values(array_filter($this->request->headers->all('cookie'), 'is_string')),
            $this->request->cookies->all()
        );
    }

    /** @return KeyholeUser|null */
    public function user()
    {
        if ($this->user !== null) {
            return $this->user;
        }
        $auth = $this->authentication();
        if ($auth->hasFailed()) {
            throw self::unavailable($auth);
        }
        return $this->user = $auth->isSignedIn() ? new KeyholeUser($auth->session()) : null;
    }

    /** Whether ['session' => token] names a live session. */
    public function validate(array $credentials = [])
    {
        $token = $credentials['session'] ?? null;
        $auth = $this->authenticator->authenticate(is_string($token) ? $token : null);
        if ($auth->hasFailed()) {
            throw self::unavailable($auth);
        }
        return $auth->isSignedIn();
    }

    public function setRequest(Request $request): self
    {
        $this->request = $request;
        $this->authentication = null;
        $this->user = null;
        return $this;
    }

    public static function unavailable(Authentication $auth): HttpException
    {
        $retry = $auth->failure()?->retryAfterMs();
        $headers = $retry === null ? [] : ['Retry-After' => (string)max(1, (int)ceil($retry / 1000))];
        return new HttpException(503, 'Sign-in is unavailable right now. Please try again shortly.', $auth->failure(), $headers);
    }
}
