<?php

// A PSR-15 app for MiddlewareTest, under PHP's built-in server (example/serve.php): the
// KeyholeMiddleware in front of a handler that answers what it was handed, as JSON.
// /required/... requires a session; other paths do not. The socket is $KEYHOLE_SOCKET.

declare(strict_types=1);

require __DIR__ . '/../../autoload.php';
require_once 'Psr/Http/Message/autoload.php';
require_once 'Nyholm/Psr7/autoload.php';
require_once __DIR__ . '/../psr15.php';

use Keyhole\Middleware\KeyholeMiddleware;
use Nyholm\Psr7\Factory\Psr17Factory;
use Nyholm\Psr7\ServerRequest;
use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\ServerRequestInterface;
use Psr\Http\Server\RequestHandlerInterface;

$factory = new Psr17Factory();
$request = (new ServerRequest($_SERVER['REQUEST_METHOD'], $_SERVER['REQUEST_URI'], getallheaders(), null, '1.1', $_SERVER))
    ->withCookieParams($_COOKIE)
    ->withQueryParams($_GET);
$path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
$client = new Keyhole\Client(null, ['timeout' => (float)(getenv('KEYHOLE_TIMEOUT') ?: 5)]);
$middleware = new KeyholeMiddleware($client, $factory, [
    'required' => str_starts_with($path, '/required'),
    'cookie' => getenv('KH_COOKIE') ?: 'kh_session',
]);
$handler = new class ($factory) implements RequestHandlerInterface {
    public function __construct(private Psr17Factory $factory)
    {
    }

    public function handle(ServerRequestInterface $request): ResponseInterface
    {
        $body = json_encode([
            'session' => $request->getAttribute(KeyholeMiddleware::SESSION),
            'user' => $request->getAttribute(KeyholeMiddleware::USER),
        ]);
        return $this->factory->createResponse(200)
            ->withHeader('Content-Type', 'application/json')
            ->withBody($this->factory->createStream($body));
    }
};
$response = $middleware->process($request, $handler);

http_response_code($response->getStatusCode());
foreach ($response->getHeaders() as $name => $values) {
    foreach ($values as $value) {
        header("$name: $value", false);
    }
}
echo $response->getBody();
