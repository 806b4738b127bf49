<?php

declare(strict_types=1);

namespace Keyhole;

/**
 * The typed helpers of Keyhole\Client, one per operation of PROTOCOL.md section 7 (debug.* through
 * call()): each names its arguments and answers the operation's result as call() does.
 */
trait Operations
{
    /** @return array{protocol: int, version: string, uptime_ms: int} */
    public function ping(): array
    {
        return $this->call('ping');
    }

    public function stats(): array
    {
        return $this->call('stats');
    }

    public function tokenVerify(string $token, ?string $issuer = null, ?string $audience = null, ?string $nonce = null): array
    {
        return $this->call('token.verify', self::present(['token' => $token, 'issuer' => $issuer, 'audience' => $audience, 'nonce' => $nonce]));
    }

    public function jwksStatus(?string $issuer = null): array
    {
        return $this->call('jwks.status', self::present(['issuer' => $issuer]));
    }

    public function jwksRefresh(?string $issuer = null): array
    {
        return $this->call('jwks.refresh', self::present(['issuer' => $issuer]));
    }

    /** @return array{session: string, id: string, expires_at: int} */
    public function sessionCreate(string $sub, ?string $issuer = null, ?int $ttlS = null, ?int $idleS = null, ?array $data = null): array
    {
        return $this->call('session.create', self::present(['sub' => $sub, 'issuer' => $issuer, 'ttl_s' => $ttlS, 'idle_s' => $idleS, 'data' => $data]));
    }

    /** The session, with `data` (an empty array for {}) and `user` (or null); session_not_found when there is none. */
    public function sessionGet(string $session): array
    {
        return $this->call('session.get', ['session' => $session]);
    }

    /** Revokes by token, or by id when $session is null. @return array{revoked: bool} */
    public function sessionRevoke(?string $session = null, ?string $id = null): array
    {
        return $this->call('session.revoke', self::present(['session' => $session, 'id' => $id]));
    }

    /** @return array{revoked: int} */
    public function sessionRevokeAll(string $sub, ?string $issuer = null): array
    {
        return $this->call('session.revoke_all', self::present(['sub' => $sub, 'issuer' => $issuer]));
    }

    /** @return array{sessions: list<array>} */
    public function sessionList(string $sub, ?string $issuer = null): array
    {
        return $this->call('session.list', self::present(['sub' => $sub, 'issuer' => $issuer]));
    }

    public function userGet(string $sub, ?string $issuer = null): array
    {
        return $this->call('user.get', self::present(['sub' => $sub, 'issuer' => $issuer]));
    }

    /**
     * @param array{email?: string|null, name?: array|null} $fields the members to change (null removes one)
     */
    public function userUpdate(string $sub, array $fields, ?string $issuer = null): array
    {
        return $this->call('user.update', self::present(['sub' => $sub, 'issuer' => $issuer]) + $fields);
    }

    public function userDelete(string $sub, ?string $issuer = null): array
    {
        return $this->call('user.delete', self::present(['sub' => $sub, 'issuer' => $issuer]));
    }

    /**
     * @param array{authorization_code?: string, client_id?: string, nonce?: string, user?: array, session?: array} $options
     */
    public function appleSignIn(string $identityToken, array $options = []): array
    {
        return $this->call('apple.sign_in', ['identity_token' => $identityToken] + $options);
    }

    public function appleNotification(string $payload): array
    {
        return $this->call('apple.notification', ['payload' => $payload]);
    }

    public function appleRefreshCheck(string $sub): array
    {
        return $this->call('apple.refresh_check', ['sub' => $sub]);
    }

    public function appleTransferExport(string $sub, string $targetTeamId, ?string $clientId = null): array
    {
        return $this->call('apple.transfer.export', self::present(['sub' => $sub, 'target_team_id' => $targetTeamId, 'client_id' => $clientId]));
    }

    public function appleTransferImport(string $transferSub, ?string $clientId = null): array
    {
        return $this->call('apple.transfer.import', self::present(['transfer_sub' => $transferSub, 'client_id' => $clientId]));
    }

    public function applePending(): array
    {
        return $this->call('apple.pending');
    }

    /**
     * Starts Sign in with Apple on the web: send the header `Set-Cookie: <cookie.set_cookie>`, then
     * redirect the browser to `url`. A null argument is keyholed's default.
     *
     * @return array{url: string, state: string, expires_at: int, cookie: array{name: string, value: string, max_age: int, set_cookie: string}}
     */
    public function appleAuthorize(?string $clientId = null, ?string $redirectUri = null, ?string $scope = null, ?string $returnTo = null): array
    {
        return $this->call('apple.authorize', self::present(['client_id' => $clientId, 'redirect_uri' => $redirectUri, 'scope' => $scope, 'return_to' => $returnTo]));
    }

    /**
     * Finishes it, on Apple's POST to the redirect URI: apple.sign_in's result, and `return_to`.
     *
     * @param array<string, string> $form the POSTed fields as received (sent as an object, even empty)
     * @param string $cookie the value of the cookie named by appleAuthorize()'s `cookie.name`
     * @param array{ttl_s?: int, idle_s?: int, data?: array}|null $session as sessionCreate's
     */
    public function appleCallback(array $form, string $cookie, ?array $session = null): array
    {
        return $this->call('apple.callback', self::present(['form' => $form, 'cookie' => $cookie, 'session' => $session]));
    }

    public function adminSnapshot(): array
    {
        return $this->call('admin.snapshot');
    }

    public function adminReload(): array
    {
        return $this->call('admin.reload');
    }

    private static function present(array $args): array
    {
        return array_filter($args, static fn ($value) => $value !== null);
    }
}
