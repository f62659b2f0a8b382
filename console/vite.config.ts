/**
 * Builds the console into static files the authority serves at /console/ under a strict
 * Content-Security-Policy: no inline script or style, no module-preload polyfill (it would be
 * inline), no assets inlined as data: URLs, nothing from another origin.
 *
 * Run from the repository's root: `npx vite build --config console/vite.config.ts`.
 */
import { fileURLToPath } from 'node:url';
import preact from '@preact/preset-vite';
import { defineConfig } from 'vite';

export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/console/',
  plugins: [preact()],
  build: {
    outDir: '../dist/console',
    emptyOutDir: true,
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    sourcemap: false,
    target: 'es2022',
  },
});
