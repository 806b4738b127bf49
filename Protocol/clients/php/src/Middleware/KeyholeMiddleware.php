<?php

declare(strict_types=1);

namespace Keyhole\Middleware;

use Keyhole\Client;
use Keyhole\Http\Authenticator;
use Psr\Http\Message\ResponseFactoryInterface;
use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\ServerRequestInterface;
use Psr\Http\Server\MiddlewareInterface;
use Psr\Http\Server\RequestHandlerInterface;

/**
 * PSR-15 middleware: asks keyholed for the request's session and hands it on as request
 * attributes `keyhole.session` (session.get's result) and `keyhole.user` (its user, or null);
 * both null when anonymous.
 *
 * Options: 'cookie' (default kh_session), 'required' (default false: anonymous requests get
 * 401 with `WWW-Authenticate: Bearer realm="keyhole"`). keyholed unreachable, past the
 * deadline or failing in any way but session_not_found: 503, and the handler is not called.
 */
final class KeyholeMiddleware implements MiddlewareInterface
{
    public const SESSION = 'keyhole.session';
    public const USER = 'keyhole.user';
    public const AUTHENTICATION = 'keyhole.authentication';

    private Authenticator $authenticator;
    private bool $required;

    /**
     * @param Client|string|null $client a Client, or the socket path for one (null: $KEYHOLE_SOCKET, else the default)
     * @param array{cookie?: string, required?: bool} $options
     */
    public function __construct(
        Client|string|null $client,
        private readonly ResponseFactoryInterface $responses,
        array $options = []
    ) {
        foreach ($options as $name => $_) {
            if (!in_array($name, ['cookie', 'required'], true)) {
                throw new \InvalidArgumentException("KeyholeMiddleware: unknown option '$name'");
            }
        }
        $client = $client instanceof Client ? $client : new Client($client);
        $this->authenticator = new Authenticator($client, $options['cookie'] ?? Authenticator::DEFAULT_COOKIE);
        $this->required = (bool)($options['required'] ?? false);
    }

    public function process(ServerRequestInterface $request, RequestHandlerInterface $handler): ResponseInterface
    {
        $authorization = $request->hasHeader('Authorization') ? $request->getHeaderLine('Authorization') : null;
        // The Cookie header itself, parsed by Authenticator::cookie(), not getCookieParams(): those
        // are PHP's $_COOKIE in most PSR-7 implementations, whose parsing a neighbour cookie can
        // defeat. getCookieParams() only for a request without a Cookie header.
        $auth = $this->authenticator->authenticateRequest($authorization, $request->getHeader('Cookie'), $request->getCookieParams());
        if ($auth->hasFailed()) {
            $response = $this->responses->createResponse(503)
                ->withHeader('Content-Type', 'text/plain; charset=utf-8')
                ->withHeader('Cache-Control', 'no-store');
            $retry = $auth->failure()->retryAfterMs();
            if ($retry !== null) {
                $response = $response->withHeader('Retry-After', (string)max(1, (int)ceil($retry / 1000)));
            }
            $response->getBody()->write("Sign-in is unavailable right now. Please try again shortly.\n");
            return $response;
        }
        if ($this->required && !$auth->isSignedIn()) {
            $response = $this->responses->createResponse(401)
                ->withHeader('WWW-Authenticate', 'Bearer realm="keyhole"')
                ->withHeader('Content-Type', 'text/plain; charset=utf-8')
                ->withHeader('Cache-Control', 'no-store');
            $response->getBody()->write("Not signed in.\n");
            return $response;
        }
        return $handler->handle($request
            ->withAttribute(self::SESSION, $auth->session())
            ->withAttribute(self::USER, $auth->user())
            ->withAttribute(self::AUTHENTICATION, $auth));
    }
}
