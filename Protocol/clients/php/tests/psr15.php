<?php

// PSR-15 (https://www.php-fig.org/psr/psr-15/): the two interfaces of psr/http-server-handler and
// psr/http-server-middleware 1.0, word for word, for the tests only. Debian has no package with
// them; an app gets them from Composer. Defined only when nothing else has.

declare(strict_types=1);

namespace Psr\Http\Server;

use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\ServerRequestInterface;

if (!interface_exists(RequestHandlerInterface::class)) {
    /**
     * Handles a server request and produces a response.
     */
    interface RequestHandlerInterface
    {
        public function handle(ServerRequestInterface $request): ResponseInterface;
    }
}

if (!interface_exists(MiddlewareInterface::class)) {
    /**
     * Participant in processing a server request and response.
     */
    interface MiddlewareInterface
    {
        public function process(ServerRequestInterface $request, RequestHandlerInterface $handler): ResponseInterface;
    }
}
