import { defineConfig } from 'vite';

// Relative asset URLs: the scheduler serves the build at `/`, a reverse
// proxy may serve it under a prefix. Hash routing keeps every page at `./`.
export default defineConfig({
  base: './',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    chunkSizeWarningLimit: 1200,
    reportCompressedSize: false,
  },
});
