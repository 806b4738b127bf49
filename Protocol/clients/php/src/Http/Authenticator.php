<?php

declare(strict_types=1);

namespace Keyhole\Http;

use Keyhole\Client;
use Keyhole\KeyholeException;

/**
 * The middleware contract, framework-free: the session token from `Authorization: Bearer kh_...`
 * if present, else the cookie (never the query string); session.get; `session_not_found` (or no
 * credential) is anonymous; any other failure fails closed.
 */
final class Authenticator
{
    public const DEFAULT_COOKIE = 'kh_session';

    public function __construct(
        private readonly Client $client,
        private readonly string $cookie = self::DEFAULT_COOKIE
    ) {
    }

    public function client(): Client
    {
        return $this->client;
    }

    public function cookieName(): string
    {
        return $this->cookie;
    }

    /**
     * The credential: a Bearer token that looks like a session token (kh_...), else the cookie.
     *
     * @param string|null $authorization the Authorization header's value
     * @param array<string, mixed> $cookies the request's cookies by name
     */
    public function credential(?string $authorization, array $cookies): ?string
    {
        if ($authorization !== null && preg_match('/^\s*Bearer\s+(kh_\S+)\s*$/i', $authorization, $m) === 1) {
            return $m[1];
        }
        $cookie = $cookies[$this->cookie] ?? null;
        return is_string($cookie) && $cookie !== '' ? $cookie : null;
    }

    public function authenticate(?string $token): Authentication
    {
        // A string that cannot be a token (kh_ and 43 base64url characters) is no session:
        // keyholed would say session_not_found; it is not sent.
        if ($token === null || preg_match('/^kh_[A-Za-z0-9_-]{43}$/', $token) !== 1) {
            return Authentication::anonymous();
        }
        try {
            return Authentication::signedIn($this->client->sessionGet($token));
        } catch (KeyholeException $e) {
            return $e->code() === 'session_not_found' ? Authentication::anonymous() : Authentication::failed($e);
        }
    }

    /** credential() then authenticate(). */
    public function authenticateRequest(?string $authorization, array $cookies): Authentication
    {
        return $this->authenticate($this->credential($authorization, $cookies));
    }
}
