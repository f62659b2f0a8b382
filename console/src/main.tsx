/**
 * The console's entry point. The stylesheet is imported here so Vite emits it as a file the
 * page links to: the Content-Security-Policy allows no inline style.
 */
import { render } from 'preact';
import { App } from './app';
import './styles.css';

const root = document.getElementById('app');
if (root) render(<App />, root);
